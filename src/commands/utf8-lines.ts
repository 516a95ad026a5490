/**
 * A file read a line at a time as UTF-8, strictly (the files of `fleet session import` and
 * `fleet batch`): each line bounded before it is held whole.
 */
import { ExportFileError } from "./session-file.js";

/**
 * The lines of a file's bytes, numbered from 1 (LF or CRLF ends one), each decoded as UTF-8
 * strictly: a byte sequence that is no UTF-8 is an ExportFileError naming its line, where a
 * lenient decoder made it U+FFFD and the import stored other text than the file's without a
 * word. A line longer than `maxBytes` is one too, found before it is held whole (a file of one
 * endless line took the memory of the command).
 */
export async function* utf8Lines(
  input: AsyncIterable<Buffer>,
  maxBytes: number,
  why = "an export is written as UTF-8",
): AsyncGenerator<{ line: number; text: string }> {
  const decoder = new TextDecoder("utf-8", { fatal: true });
  let parts: Buffer[] = [];
  let size = 0;
  let line = 0;
  const take = (last: Buffer): { line: number; text: string } => {
    const bytes = parts.length === 0 ? last : Buffer.concat([...parts, last]);
    parts = [];
    size = 0;
    line++;
    let text: string;
    try {
      text = decoder.decode(bytes);
    } catch {
      throw new ExportFileError(line, `not valid UTF-8 (${why})`);
    }
    return { line, text: text.endsWith("\r") ? text.slice(0, -1) : text };
  };
  for await (const chunk of input) {
    let from = 0;
    for (;;) {
      const newline = chunk.indexOf(0x0a, from);
      const piece = chunk.subarray(from, newline === -1 ? chunk.length : newline);
      if (size + piece.length > maxBytes)
        throw new ExportFileError(
          line + 1,
          `the line is longer than ${maxBytes / 1024 / 1024} MiB, more than one request may hold`,
        );
      if (newline === -1) {
        if (piece.length > 0) parts.push(piece);
        size += piece.length;
        break;
      }
      yield take(piece);
      from = newline + 1;
    }
  }
  if (size > 0) yield take(Buffer.alloc(0));
}
