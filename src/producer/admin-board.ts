/**
 * Bull Board at `/admin/queues`: the fleet's BullMQ queues for operators, behind admin API
 * keys (http-api.ts checks every `/admin` request before it reaches the board). Read-only:
 * a session is acted on through `/v1` (resume, send), whose checks a queue action would skip.
 * Its page is served without the links to other hosts Bull Board's template has (its fonts
 * from fonts.googleapis.com: every admin's address went to Google, and the page waited on it
 * where there is no Internet); its CSS then uses the system's fonts, which it names next.
 * The headers of every /admin answer (CSP, no framing, no caching): admin-headers.ts.
 */

import type { Queue } from "bullmq";
import type { FastifyInstance } from "fastify";
import { bullBoard, bullBoardBullMQ, bullBoardFastify } from "./api-packages.js";
import { ADMIN_PREFIX } from "./http-api.js";

export const BOARD_PATH = `${ADMIN_PREFIX}/queues`;

/** A `<link>` to another host (`http://`, `https://` or `//`), with the white space after it. */
const REMOTE_LINK = /<link\b[^>]*\bhref\s*=\s*["']?(?:https?:)?\/\/[^>]*>\s*/gi;

/** An HTML page without its `<link>`s to other hosts (pure). */
export function withoutRemoteLinks(html: string): string {
  return html.replace(REMOTE_LINK, "");
}

/** A plugin for `buildApi`'s `admin` option that serves Bull Board over `queues`. */
export function adminBoard(queues: Queue[]): (app: FastifyInstance) => Promise<void> {
  return async (app) => {
    const serverAdapter = new bullBoardFastify.FastifyAdapter();
    serverAdapter.setBasePath(BOARD_PATH);
    bullBoard.createBullBoard({
      queues: queues.map((queue) => new bullBoardBullMQ.BullMQAdapter(queue, { readOnlyMode: true })),
      serverAdapter,
      options: { uiConfig: { boardTitle: "agent-fleet" } },
    });
    app.addHook("onSend", async (_request, reply, payload) =>
      typeof payload === "string" && String(reply.getHeader("content-type")).startsWith("text/html")
        ? withoutRemoteLinks(payload)
        : payload,
    );
    await app.register(serverAdapter.registerPlugin(), { prefix: BOARD_PATH });
  };
}
