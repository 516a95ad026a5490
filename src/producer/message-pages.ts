/** How `FleetClient.messages` reads a session's messages page by page (its doc says what it does). */
import type { SessionJson } from "../shared/api-types.js";
import { FleetApiError } from "./client-errors.js";
import type { SessionPageOptions } from "./client-options.js";

/** `FleetClient.messages`, reading each page with `getSession` (the client's). */
export async function* messagePages(
  getSession: (sessionId: string, options: SessionPageOptions) => Promise<SessionJson>,
  sessionId: string,
  options: {
    afterSeq?: number | undefined;
    pageSize?: number | undefined;
    signal?: AbortSignal | undefined;
  },
): AsyncGenerator<SessionJson["messages"][number]> {
  const { signal } = options;
  let afterSeq = options.afterSeq ?? 0;
  const limit = options.pageSize ?? 500;
  for (;;) {
    let page: SessionJson;
    try {
      page = await getSession(sessionId, { afterSeq, limit, runsLimit: 0, signal });
    } catch (error) {
      if (!(error instanceof FleetApiError && error.status === 400 && error.field !== undefined)) throw error;
      if (!["limit", "runsLimit"].includes(error.field)) throw error;
      // The last release's API: no paging, every message after `afterSeq` at once.
      yield* (await getSession(sessionId, { afterSeq, signal })).messages;
      return;
    }
    for (const message of page.messages) {
      afterSeq = message.seq;
      yield message;
    }
    // null: nothing after this page; absent: an API that ignored `limit` sent them all.
    if (page.nextAfterSeq === null || page.nextAfterSeq === undefined) return;
  }
}
