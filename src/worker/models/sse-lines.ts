/**
 * A provider's response body regrouped into whole lines before the SDK reads it (used by
 * transport.ts for every response a provider client receives).
 *
 * Both SDKs split a body into lines by appending each network chunk to the bytes of the
 * line so far and scanning that buffer again from its start: a line of n bytes arriving in
 * 64 KB chunks costs time quadratic in n. A server that sends its answer as one long line (a
 * broken or hostile OpenAI-compatible server; one `data:` delta of 40 MB) kept a worker's CPU
 * busy for the whole idle limit (120 s; 17 s for 10 MB), before any bound on output applied,
 * and the step then failed as "the model sent nothing" and was asked again. Here the chunks
 * of a line are kept as they come and handed on together once the line ends, so the SDK
 * receives whole lines and its work is linear; the bytes are not changed.
 *
 * A line longer than `maxLineBytes` (no SSE event or JSON body a provider sends is anywhere
 * near that long) fails the body with a ProviderError that is not retried: the same request
 * would get the same line again.
 */
import { ProviderError, type ProviderErrorInfo } from "./provider.js";

/** The longest line a provider's body may send: 64 MiB. */
export const MAX_LINE_BYTES = 64 * 1024 * 1024;

const LF = 0x0a;
const CR = 0x0d;

function concat(parts: Uint8Array[], bytes: number): Uint8Array {
  if (parts.length === 1) return parts[0]!;
  const out = new Uint8Array(bytes);
  let at = 0;
  for (const part of parts) {
    out.set(part, at);
    at += part.length;
  }
  return out;
}

/** `body` with its chunks regrouped to end at line ends (see the file comment). */
export function wholeLines(
  body: ReadableStream<Uint8Array>,
  info: ProviderErrorInfo,
  maxLineBytes = MAX_LINE_BYTES,
): ReadableStream<Uint8Array> {
  let pending: Uint8Array[] = [];
  let pendingBytes = 0;
  const label = info.provider ?? "provider";
  return body.pipeThrough(
    new TransformStream<Uint8Array, Uint8Array>({
      transform(chunk, controller) {
        const end = Math.max(chunk.lastIndexOf(LF), chunk.lastIndexOf(CR));
        if (end < 0) {
          pending.push(chunk);
          pendingBytes += chunk.length;
          if (pendingBytes > maxLineBytes)
            controller.error(
              new ProviderError(
                `${label}: the response sent a line longer than ${maxLineBytes} bytes; no event is that long`,
                false,
                undefined,
                info,
              ),
            );
          return;
        }
        pending.push(chunk.subarray(0, end + 1));
        controller.enqueue(concat(pending, pendingBytes + end + 1));
        const rest = chunk.subarray(end + 1);
        pending = rest.length > 0 ? [rest] : [];
        pendingBytes = rest.length;
      },
      flush(controller) {
        if (pendingBytes > 0) controller.enqueue(concat(pending, pendingBytes));
      },
    }),
  );
}
