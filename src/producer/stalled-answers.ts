/**
 * A streamed answer (a batch's results, `application/x-ndjson`) to a client that stays connected
 * but takes nothing — stuck, or holding the API's memory on purpose: once the connection's
 * buffers are full and no `drain` comes for `stallMs` (FLEET_SSE_STALL_MS, as for an event
 * stream: event-stream-drain.ts), the answer is destroyed, which frees its page of results (up
 * to ~8 MiB of outputs) and its connection. Before, nothing bounded it: it was held for as long
 * as TCP kept the connection, and any number of such readers grew the API's memory without
 * bound. A reader that reads, however slowly, drains the buffers and is never cut.
 */
import type { ServerResponse } from "node:http";

/** FLEET_SSE_STALL_MS's default, for callers that give none. */
export const DEFAULT_ANSWER_STALL_MS = 60_000;
/** How often a streamed answer looks whether its buffers are still full. */
const TICK_MS = 1_000;

/** Whether a streamed answer whose buffers have been full since `fullSince` (null: they are not) is stalled (pure). */
export function answerStalled(fullSince: number | null, now: number, stallMs: number): boolean {
  return fullSince !== null && now - fullSince >= stallMs;
}

/** Destroys `response` once its buffers stay full for `stallMs` without a drain; `onStalled` is told first. */
export function closeWhenStalled(
  response: ServerResponse,
  stallMs: number,
  onStalled: () => void = () => {},
  now: () => number = Date.now,
): void {
  let fullSince: number | null = null;
  const onDrain = () => {
    fullSince = null;
  };
  const timer = setInterval(
    () => {
      if (!response.writableNeedDrain) {
        fullSince = null;
        return;
      }
      fullSince ??= now();
      if (!answerStalled(fullSince, now(), stallMs)) return;
      stop();
      onStalled();
      response.destroy();
    },
    Math.max(10, Math.min(TICK_MS, stallMs)),
  );
  timer.unref();
  const stop = () => {
    clearInterval(timer);
    response.off("drain", onDrain);
    response.off("close", stop);
  };
  response.on("drain", onDrain);
  response.on("close", stop);
}
