/**
 * An event stream's wait for its reader to take what was written (event-stream.ts): a write
 * that filled the socket's buffer waits for `drain`. A reader that stays connected but reads
 * nothing (stuck, or holding its tenant's slots on purpose) never drains it; the wait looks
 * every `tickMs` whether the stream may go on (its key not revoked, the API not stopping), and
 * gives up after `stallMs` without a drain (FLEET_SSE_STALL_MS). On either, the caller closes
 * the connection (destroyed, so what the buffers hold is not sent later either) and frees its slot.
 */
import type { ServerResponse } from "node:http";

/** How a wait for the reader ended: it took the buffer (or went away), read nothing for `stallMs`, or may no longer read. */
export type DrainEnd = "drained" | "stalled" | "refused";

export type DrainWait = {
  stallMs: number;
  /** How often the wait asks `mayGoOn`. */
  tickMs: number;
  /** Whether the stream may go on (asked every tick; false ends the wait `refused`). */
  mayGoOn: () => Promise<boolean>;
  now?: () => number;
};

/** What a tick of the wait decides: a pure function of the time waited and the answer asked. */
export function drainVerdict(waitedMs: number, stallMs: number, mayGoOn: boolean): DrainEnd | "wait" {
  if (!mayGoOn) return "refused";
  return waitedMs >= stallMs ? "stalled" : "wait";
}

/** Waits for `drain` (or `close`) on the response, at most `stallMs`, asking `mayGoOn` every tick. */
export async function waitForDrain(response: ServerResponse, wait: DrainWait): Promise<DrainEnd> {
  const now = wait.now ?? Date.now;
  const since = now();
  for (;;) {
    let timer: NodeJS.Timeout | undefined;
    let done: () => void = () => {};
    const drained = await new Promise<boolean>((resolve) => {
      done = () => resolve(true);
      response.on("drain", done);
      response.on("close", done);
      const left = Math.max(1, since + wait.stallMs - now());
      timer = setTimeout(() => resolve(false), Math.min(wait.tickMs, left));
    });
    clearTimeout(timer);
    response.off("drain", done);
    response.off("close", done);
    if (drained) return "drained";
    const verdict = drainVerdict(now() - since, wait.stallMs, await wait.mayGoOn());
    if (verdict !== "wait") return verdict;
  }
}
