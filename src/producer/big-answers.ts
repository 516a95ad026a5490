/**
 * A whole answer of a big session (`GET /v1/sessions/:id` unpaged, api-routes.ts), which holds
 * one of the places of the API's big work (big-bodies.ts) until its response closes. Sent as
 * one write, its client's pace could not be seen: a client that stayed connected and read
 * nothing held the place for ever, and with it every other tenant's big body and big answer
 * waited (FLEET_API_MAX_BIG_BODIES is 2: two such connections of one tenant took both).
 *
 * So it is written in pieces, and a client that takes nothing of it for `stallMs`
 * (FLEET_SSE_STALL_MS, as an event stream's reader that takes nothing) has its connection
 * destroyed: the response closes and the place goes to the next in line. Progress is seen as
 * the socket takes pieces, which it does once its buffers (up to a few MB) have partly
 * drained: a client reading steadily keeps its answer (at 3 MB/s the pieces moved every
 * 0.4-1.2 s here); one reading less than about half those buffers in `stallMs` (some 30 KB/s
 * against the default 60 s) is cut as an event stream's reader is.
 */
import type { ServerResponse } from "node:http";
import { Readable } from "node:stream";

/** UTF-16 units of one piece of a big answer (about 64 KiB of JSON). */
export const ANSWER_PIECE_UNITS = 64 * 1024;

/** `text` in pieces of at most `size` UTF-16 units (≥ 2), none ending inside a surrogate pair (pure). */
export function* answerPieces(text: string, size = ANSWER_PIECE_UNITS): Generator<string> {
  for (let start = 0; start < text.length; ) {
    let end = Math.min(text.length, start + size);
    const last = text.charCodeAt(end - 1);
    // A high surrogate last: its pair goes with the next piece (each piece is encoded alone).
    if (end < text.length && last >= 0xd800 && last <= 0xdbff) end--;
    yield text.slice(start, end);
    start = end;
  }
}

/**
 * Whether an answer is stalled (pure): its progress (`mark`: the pieces taken and what is
 * still buffered) has not moved for `stallMs`. `since`: when `mark` was first seen.
 */
export function answerStalled(
  mark: string,
  seen: { mark: string; since: number },
  now: number,
  stallMs: number,
) {
  return mark === seen.mark && now - seen.since >= stallMs;
}

/**
 * `text` as the stream `response` sends, a piece at a time; destroys the response's connection
 * once its client has taken nothing for `stallMs` before the answer finished (see the file comment).
 */
export function watchedAnswer(
  text: string,
  response: ServerResponse,
  stallMs: number,
  now: () => number = Date.now,
): Readable {
  let taken = 0;
  const stream = Readable.from(
    (function* () {
      for (const piece of answerPieces(text)) {
        taken++;
        yield piece;
      }
    })(),
  );
  // What moves while the client reads: pieces pulled, then (once all are) the buffers emptying.
  const mark = () => `${taken}:${stream.readableLength}:${response.writableLength}`;
  let seen = { mark: mark(), since: now() };
  const timer = setInterval(
    () => {
      if (response.writableFinished) return clearInterval(timer);
      const current = mark();
      if (answerStalled(current, seen, now(), stallMs)) {
        clearInterval(timer);
        response.destroy();
      } else if (current !== seen.mark) seen = { mark: current, since: now() };
    },
    Math.max(20, Math.min(1_000, Math.floor(stallMs / 4))),
  );
  timer.unref();
  response.once("close", () => clearInterval(timer));
  return stream;
}
