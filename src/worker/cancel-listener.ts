/**
 * The worker's subscription to the cancel channel (worker-signals.ts `cancelChannel`):
 * sessions cancelled through the API (contracts §9) are aborted as on SIGTERM past the grace
 * period, the runs the cancel found running only (running-jobs.ts); the check before each tool
 * starts (agent-loop.ts) covers a message this worker missed. Sessions a delete removed take
 * what this worker keeps of them along: their kept history, their transcripts, and the
 * extensions' onSessionDeleted hooks are woken.
 */
import type { Redis } from "ioredis";
import type { Logger } from "pino";
import { createRedis } from "../shared/redis.js";
import { cancelChannel, parseCancelMessage } from "../shared/worker-signals.js";
import type { DeletionHooks } from "./deletion-hooks.js";
import type { HistoryCache } from "./history-cache.js";
import type { RunningJobs } from "./running-jobs.js";
import type { TranscriptCleanup } from "./transcript-cleanup.js";

export type CancelListenerDeps = {
  redisUrl: string;
  prefix: string;
  running: RunningJobs;
  deletionHooks: Pick<DeletionHooks, "wake">;
  histories: Pick<HistoryCache, "take"> | undefined;
  transcripts: Pick<TranscriptCleanup, "remove"> | null;
  log: Logger;
};

/** Subscribes a connection of its own to the cancel channel; returns it (closed on stop). */
export async function listenForCancels(deps: CancelListenerDeps): Promise<Redis> {
  const { running, deletionHooks, histories, transcripts, log } = deps;
  const cancelRedis = createRedis(deps.redisUrl, "worker");
  cancelRedis.on("message", (_channel: string, text: string) => {
    const { sessionIds, runIds, deleted } = parseCancelMessage(text);
    running.cancel(sessionIds, runIds);
    if (deleted.length > 0) deletionHooks.wake();
    // A deleted session's kept history goes at once (a delete also reaching no worker leaves
    // it to be pushed out; no claim can use it: the session is gone).
    for (const id of deleted) histories?.take(id);
    if (deleted.length > 0)
      transcripts
        ?.remove(deleted)
        .catch((error: unknown) =>
          log.warn({ err: error }, "could not remove deleted sessions' transcripts"),
        );
  });
  await cancelRedis.subscribe(cancelChannel(deps.prefix));
  return cancelRedis;
}
