/**
 * A streamed answer (a batch's results, `application/x-ndjson`) whose key is revoked while it is
 * sent ends, as an event stream does (event-stream-serve.ts): every `everyMs` it asks whether the
 * request's key still works for its tenant, and once not, the connection is destroyed (what the
 * API still holds of the answer is not sent). Before, the answer paged through the whole batch
 * as its reader took lines: a reader that read slowly got every output of a batch of any size
 * with a key revoked long before (test/batch-results-key-revoked.test.ts).
 */
import type { ServerResponse } from "node:http";

/** How often a streamed answer asks whether its key still works (as an event stream does). */
export const KEY_RECHECK_MS = 1_000;

/**
 * Destroys `response` once `allowed` answers false (asked every `everyMs` until the response
 * closes); `onRefused` is told first. An `allowed` that fails (Postgres unreachable) lets the
 * answer go on: the next tick asks again.
 */
export function closeWhenRevoked(
  response: ServerResponse,
  allowed: () => Promise<boolean>,
  onRefused: () => void = () => {},
  everyMs = KEY_RECHECK_MS,
): void {
  let asking = false;
  const timer = setInterval(() => {
    if (asking) return;
    asking = true;
    allowed()
      .catch(() => true)
      .then((ok) => {
        asking = false;
        if (ok || response.destroyed) return;
        stop();
        onRefused();
        response.destroy();
      });
  }, everyMs);
  timer.unref();
  const stop = () => {
    clearInterval(timer);
    response.off("close", stop);
  };
  response.on("close", stop);
}
