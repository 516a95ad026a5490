/**
 * A page read of a long transcript that fails (a network blip, a 500, a 429) is tried again,
 * with backoff, while the page follows the session: otherwise the transcript stayed partial
 * until a reload or the next event, shown as if complete. Pure decisions only.
 */
import { ApiError } from "./api";

/** What the transcript says while a read is tried again. */
export type ReadRetry = { attempt: number; inMs: number; failure: unknown };

/**
 * Whether a failed read may answer if asked again: no answer at all (the network, the read's
 * time limit) or an answer that says "later" (408, 429, 5xx). Another answer (401, 403, 404,
 * 400) would be the same again.
 */
export function retryableRead(failure: unknown): boolean {
  if (failure instanceof ApiError)
    return failure.status === 408 || failure.status === 429 || failure.status >= 500;
  // fetch's network failures are TypeErrors; its time limit and aborts are DOMExceptions.
  return failure instanceof TypeError || (failure instanceof DOMException && failure.name === "TimeoutError");
}

/** The wait before try `attempt` (2, 3, …): 1 s, doubled each time, at most 30 s. */
export function retryDelayMs(attempt: number): number {
  return Math.min(30_000, 1_000 * 2 ** Math.max(0, attempt - 2));
}
