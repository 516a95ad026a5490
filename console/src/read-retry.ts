/**
 * A read of the console that fails for a moment (a network blip, a 503, a 429) is tried again,
 * with backoff, while the page still wants it: the first read of a page (a session, the
 * sessions list, a batch) as well as a later page of a long transcript. Otherwise the page
 * showed an error, or a transcript stayed partial shown as if complete, until a reload.
 */
import { ApiError } from "./api";
import { retryDelayMs as retryWaitMs } from "./retry-wait";

/** What the page says while a read is tried again. */
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

/**
 * Whether the API refused a read for good: an answer no other try would change (a 400, a 403,
 * a 414 for an id over 100 characters). Not a 401, which asks for a key, nor a 404, which the
 * page says as "not found".
 */
export function refusedForGood(failure: unknown): boolean {
  return (
    failure instanceof ApiError && failure.status !== 401 && failure.status !== 404 && !retryableRead(failure)
  );
}

/** The wait before try `attempt` after `failure` (retry-wait.ts: its Retry-After, if any, bounded). */
export function retryDelayMs(attempt: number, failure?: unknown): number {
  return retryWaitMs(attempt, failure instanceof ApiError ? failure.retryAfter : undefined);
}

/**
 * `read()` until it answers: a failure `retryableRead` allows is tried again after
 * `retryDelayMs`, told through `onRetry` (null once a try answers or fails for good); another
 * failure is thrown. Resolves `{ answer }`, or null once `wanted()` is false after a wait (the
 * page left the read: it shows nothing of it, not even its failure).
 */
export async function readRetried<T>(
  read: () => Promise<T>,
  options: { wanted: () => boolean; onRetry: (retry: ReadRetry | null) => void },
): Promise<{ answer: T } | null> {
  for (let attempt = 1; ; ) {
    try {
      const answer = await read();
      if (attempt > 1) options.onRetry(null);
      return { answer };
    } catch (failure) {
      if (!retryableRead(failure) || !options.wanted()) {
        if (attempt > 1) options.onRetry(null);
        throw failure;
      }
      attempt++;
      const inMs = retryDelayMs(attempt, failure);
      options.onRetry({ attempt, inMs, failure });
      await new Promise((resolve) => setTimeout(resolve, inMs));
      if (!options.wanted()) return null;
    }
  }
}
