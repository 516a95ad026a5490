/**
 * The lines of a streamed body as they arrive (the client's Server-Sent Events and NDJSON
 * readers), split by shared/line-splitter.ts: each chunk searched once, a `\r\n` split across
 * two chunks one line end. Text after the last line end is yielded as a last line when the
 * body ends without one (NDJSON's last line; an SSE reader finds no blank line after it).
 */
import { lineSplitter } from "../shared/line-splitter.js";

export async function* textLines(body: AsyncIterable<Uint8Array>): AsyncGenerator<string> {
  const decoder = new TextDecoder();
  const lines = lineSplitter();
  for await (const chunk of body) yield* lines.push(decoder.decode(chunk, { stream: true }));
  yield* lines.push(decoder.decode());
  const rest = lines.rest();
  if (rest !== undefined) yield rest;
}
