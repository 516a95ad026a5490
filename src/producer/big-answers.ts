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
 * the socket's buffers (up to a few MB) drain: a client reading steadily keeps its answer; one
 * whose buffers stay full for `stallMs` (reading less than about 30 KB/s against the default
 * 60 s) is cut as an event stream's reader is.
 */
import type { ServerResponse } from "node:http";
import { Readable } from "node:stream";
import { closeWhenStalled } from "./stalled-answers.js";

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
 * `text` as the stream `response` sends, a piece at a time; destroys the response's connection
 * once its client has taken nothing for `stallMs` with its buffers full (stalled-answers.ts, the
 * rule a batch's results follow), which frees the place it holds.
 */
export function watchedAnswer(text: string, response: ServerResponse, stallMs: number): Readable {
  closeWhenStalled(response, stallMs);
  return Readable.from(answerPieces(text));
}
