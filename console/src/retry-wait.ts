/**
 * How long the console waits before it tries a failed read again (read-retry.ts): its own
 * backoff, or what the API's `Retry-After` asks (a 429, a 503), bounded — as the TypeScript
 * client waits a 429 out. Pure: no DOM, no fetch.
 */

/** The longest `Retry-After` the page waits out (a day's would leave it "trying again" for good). */
export const MAX_RETRY_AFTER_MS = 5 * 60_000;

/**
 * The seconds a `Retry-After` header asks to wait: a number of seconds (≥ 0) or an HTTP date
 * (the seconds until it, 0 when past); undefined when there is none or it cannot be read.
 */
export function retryAfterSeconds(header: string | null, now = Date.now()): number | undefined {
  if (header === null || header.trim() === "") return undefined;
  const seconds = Number(header);
  if (Number.isFinite(seconds)) return seconds >= 0 ? seconds : undefined;
  const at = Date.parse(header);
  return Number.isNaN(at) ? undefined : Math.max(0, (at - now) / 1000);
}

/**
 * The wait before try `attempt` (2, 3, …): 1 s, doubled each time, at most 30 s — or longer
 * when the failed answer's `Retry-After` (`retryAfter`, seconds) asks it, up to
 * MAX_RETRY_AFTER_MS. Before, the header was not read, and a 429 that asked for 4 s was asked
 * again after 1 s.
 */
export function retryDelayMs(attempt: number, retryAfter?: number): number {
  const backoff = Math.min(30_000, 1_000 * 2 ** Math.max(0, attempt - 2));
  if (retryAfter === undefined) return backoff;
  return Math.min(MAX_RETRY_AFTER_MS, Math.max(backoff, Math.ceil(retryAfter * 1000)));
}

/** Polls before the stream is tried again when the API did not say when (a route it lacks). */
const POLLS_BEFORE_STREAM = 15;

/**
 * How long a session page polls before it asks for the event stream again (live.ts), after
 * an answer of `status` with `retryAfter` (seconds) at try `attempt`: what a 429 (too many
 * streams) or a Retry-After asks, at least the reads' backoff and at most
 * MAX_RETRY_AFTER_MS, with `asked` true; else POLLS_BEFORE_STREAM polls of `pollMs`.
 */
export function streamWaitMs(
  attempt: number,
  pollMs: number,
  status?: number,
  retryAfter?: number,
): { ms: number; asked: boolean } {
  const asked = status === 429 || retryAfter !== undefined;
  if (!asked) return { ms: POLLS_BEFORE_STREAM * pollMs, asked };
  return { ms: retryDelayMs(attempt, retryAfter), asked };
}
