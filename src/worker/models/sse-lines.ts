/**
 * A provider's response body regrouped into whole lines, and large events into whole events,
 * before the SDK reads it (used by transport.ts for every response a provider client receives).
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
 * The same holds one level up, for the lines of one event (up to the blank line that ends it):
 * the OpenAI SDK copies and scans an event's bytes again at every chunk, and both SDKs keep all
 * its lines until it ends. A server whose event never ends (`data:` lines, never a blank one)
 * had the Anthropic SDK hold every byte of it (1.2 GB after 25 s, until the step's limit) and
 * the OpenAI SDK's CPU busy for the whole step. So once an event passes EVENT_HOLD_BYTES, the
 * rest of its lines are held and handed on with its end, in one chunk. Smaller events go on
 * line by line as before: a keep-alive comment line shows the stream alive as it comes.
 *
 * A line longer than `maxLineBytes`, or an event longer than it (no SSE event or JSON body a
 * provider sends is anywhere near that long), fails the body with a ProviderError that is not
 * retried: the same request would get the same again.
 */
import { ProviderError, type ProviderErrorInfo } from "./provider.js";

/** The longest line, and event, a provider's body may send: 64 MiB. */
export const MAX_LINE_BYTES = 64 * 1024 * 1024;

/** The size past which the rest of an event is held until it ends (see the file comment). */
export const EVENT_HOLD_BYTES = 1024 * 1024;

const LF = 0x0a;
const CR = 0x0d;
/** What ends an event, as the SDKs find it: `\n\n`, `\r\r`, `\r\n\r\n`. */
const EVENT_ENDS = [Buffer.from("\n\n"), Buffer.from("\r\r"), Buffer.from("\r\n\r\n")];

function hasLineEnd(bytes: Uint8Array): boolean {
  return bytes.includes(LF) || bytes.includes(CR);
}

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

/** The index just past the last of `patterns` in `bytes`, or -1. */
function lastEnd(bytes: Uint8Array): number {
  const view = Buffer.from(bytes.buffer, bytes.byteOffset, bytes.byteLength);
  let end = -1;
  for (const pattern of EVENT_ENDS) {
    const at = view.lastIndexOf(pattern);
    if (at >= 0) end = Math.max(end, at + pattern.length);
  }
  return end;
}

/**
 * Where the last event end in `chunk` ends (an index into `chunk`, past the end's last byte),
 * `before` being the (up to 3) bytes that came before it, where an end may begin; -1 when none.
 */
export function lastEventEnd(before: Uint8Array, chunk: Uint8Array): number {
  const inside = lastEnd(chunk);
  if (inside >= 0) return inside;
  const across = lastEnd(Buffer.concat([before, chunk.subarray(0, 3)])) - before.length;
  return across > 0 ? across : -1;
}

/** `body` with its chunks regrouped to end at line ends, or event ends (see the file comment). */
export function wholeLines(
  body: ReadableStream<Uint8Array>,
  info: ProviderErrorInfo,
  maxLineBytes = MAX_LINE_BYTES,
): ReadableStream<Uint8Array> {
  /** Bytes received and not handed on yet (never holding a whole event's end). */
  let pending: Uint8Array[] = [];
  let pendingBytes = 0;
  /** Bytes of the current event already handed on. */
  let eventSent = 0;
  /** The last bytes received (an event end may begin in them). */
  let last: Uint8Array = new Uint8Array();
  const label = info.provider ?? "provider";
  const refuse = (what: string) =>
    new ProviderError(
      `${label}: the response sent ${what} longer than ${maxLineBytes} bytes; no event is that long`,
      false,
      undefined,
      info,
    );
  /** Hands on the first `bytes` of what is pending. */
  const handOn = (controller: TransformStreamDefaultController<Uint8Array>, bytes: number) => {
    const all = concat(pending, pendingBytes);
    controller.enqueue(all.subarray(0, bytes));
    const rest = all.subarray(bytes);
    pending = rest.length > 0 ? [rest] : [];
    pendingBytes = rest.length;
  };
  return body.pipeThrough(
    new TransformStream<Uint8Array, Uint8Array>({
      transform(chunk, controller) {
        if (chunk.length === 0) return;
        const eventEnd = lastEventEnd(last, chunk);
        last = chunk.length >= 3 ? chunk.subarray(-3) : Buffer.concat([last, chunk]).subarray(-3);
        pending.push(chunk);
        pendingBytes += chunk.length;
        if (eventEnd >= 0) {
          // An event ended in this chunk: all up to there goes on.
          handOn(controller, pendingBytes - chunk.length + eventEnd);
          eventSent = 0;
        }
        if (eventSent + pendingBytes > EVENT_HOLD_BYTES) {
          // A large event: held until it ends, within the bound.
          if (eventSent + pendingBytes <= maxLineBytes) return;
          const oneLine = pendingBytes > maxLineBytes && !pending.some((part) => hasLineEnd(part));
          controller.error(refuse(oneLine ? "a line" : "an event"));
          return;
        }
        const lineEnd = Math.max(chunk.lastIndexOf(LF), chunk.lastIndexOf(CR));
        if (lineEnd < 0 || pendingBytes === 0) return;
        const bytes = pendingBytes - chunk.length + lineEnd + 1;
        if (bytes <= 0) return;
        handOn(controller, bytes);
        eventSent += bytes;
      },
      flush(controller) {
        if (pendingBytes > 0) controller.enqueue(concat(pending, pendingBytes));
      },
    }),
  );
}
