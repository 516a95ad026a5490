/**
 * How long `waitForRun` waits between two polls of a run: 50 ms after the first, half as long
 * again after each, up to 1 s — a short run is seen to end within a few tens of milliseconds,
 * and a long one costs one request a second per waiter, not twenty. A caller's `intervalMs`
 * fixes it instead.
 */
export const FIRST_POLL_DELAY_MS = 50;
export const MAX_POLL_DELAY_MS = 1_000;

/** The wait before poll `poll + 1` (`poll` 0 after the first poll). */
export function pollDelay(poll: number, intervalMs?: number): number {
  if (intervalMs !== undefined) return intervalMs;
  return Math.min(MAX_POLL_DELAY_MS, Math.round(FIRST_POLL_DELAY_MS * 1.5 ** poll));
}
