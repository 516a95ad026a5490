/**
 * An error answer's body, bounded (used by transport.ts for every answer outside 2xx that is
 * not a redirect: a 4xx or 5xx).
 *
 * Both SDKs read an error answer's body whole (`await response.text()`) before they make their
 * error, with no bound: a gateway that answers `502` with a body that never ends (a log dumped,
 * a hostile endpoint) had the worker hold all of it — 1.4 GB of RSS after 20 s of one request —
 * and past V8's longest string the process died of a fatal error, every session on it with it.
 * The idle limit did not stop it: the body kept coming. Here the SDK gets the body's first
 * MAX_ERROR_BODY_BYTES (an error's JSON, or enough of a page to say what it is; the error keeps
 * 2,000 characters of it: failure-text.ts), and the rest is not read: the connection is closed.
 */

/** The most of an error answer's body read: an error's JSON is far shorter. */
export const MAX_ERROR_BODY_BYTES = 64 * 1024;

/**
 * The first `maxBytes` of `body` (what arrived before it broke, if it broke first); the rest
 * is not read: the connection is closed, not drained (odd-answers.ts quotes a body's head too).
 */
export async function headBytes(body: ReadableStream<Uint8Array>, maxBytes: number): Promise<Buffer> {
  const reader = body.getReader();
  const parts: Uint8Array[] = [];
  let bytes = 0;
  try {
    while (bytes < maxBytes) {
      const { done, value } = await reader.read();
      if (done) break;
      parts.push(value);
      bytes += value.length;
    }
  } catch {
    // What arrived before the break is what there is.
  } finally {
    await reader.cancel().catch(() => {});
  }
  return Buffer.concat(parts).subarray(0, maxBytes);
}

/** `response` (not 2xx) with its body cut to its first `maxBytes`; the rest is not read. */
export async function boundedErrorAnswer(
  response: Response,
  maxBytes = MAX_ERROR_BODY_BYTES,
): Promise<Response> {
  if (response.body === null) return response;
  return new Response(await headBytes(response.body, maxBytes), {
    status: response.status,
    statusText: response.statusText,
    headers: response.headers,
  });
}
