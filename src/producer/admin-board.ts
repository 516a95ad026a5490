/**
 * Bull Board at `/admin/queues`: the fleet's BullMQ queues for operators, behind admin API
 * keys (http-api.ts checks every `/admin` request before it reaches the board). Read-only:
 * a session is acted on through `/v1` (resume, send), whose checks a queue action would skip.
 */

import type { Queue } from "bullmq";
import type { FastifyInstance } from "fastify";
import { bullBoard, bullBoardBullMQ, bullBoardFastify } from "./api-packages.js";
import { ADMIN_PREFIX } from "./http-api.js";

export const BOARD_PATH = `${ADMIN_PREFIX}/queues`;

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
    await app.register(serverAdapter.registerPlugin(), { prefix: BOARD_PATH });
  };
}
