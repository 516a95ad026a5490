/**
 * The JSON Lines file `fleet batch submit` reads (batch.ts): its lines, numbered, each read as a
 * session, and the error that names a bad one.
 */
import { createReadStream } from "node:fs";
import { stat } from "node:fs/promises";
import type { BatchSessionInput } from "../producer/client.js";
import { BODY_LIMIT } from "../producer/request-limits.js";
import { BATCH_LINE_SHAPE } from "./batch-line.js";
import { ExportFileError, utf8Lines } from "./session-file.js";

/** An input line that is not a session: names the file's line (exit 2). */
export class LineError extends Error {}

/**
 * Lines of a file (or stdin for `-`), numbered from 1, without blank ones; each decoded as UTF-8
 * strictly (utf8Lines) and at most what one request may hold. Read leniently, a byte that is no
 * UTF-8 became U+FFFD and the batch was submitted with other text than the file's.
 */
export async function* numberedLines(file: string): AsyncGenerator<{ line: number; text: string }> {
  const input: AsyncIterable<Buffer> = file === "-" ? process.stdin : createReadStream(file);
  try {
    for await (const item of utf8Lines(input, BODY_LIMIT, "a JSON Lines file is UTF-8"))
      if (item.text.trim() !== "") yield item;
  } catch (error) {
    if (error instanceof ExportFileError) throw new LineError(`${file}:${error.line}: ${error.message}`);
    // What stat could not tell (a folder, a FIFO that cannot be opened): one line naming the file.
    if ((error as NodeJS.ErrnoException).syscall !== undefined)
      throw new LineError(`${file}: cannot be read (${(error as Error).message})`);
    throw error;
  }
}

/**
 * The sessions a file holds, each line read as `submit` will send it, so that a bad line is
 * named before any part is sent; undefined for stdin or what is not a regular file (read once).
 */
export async function checkLines(file: string): Promise<number | undefined> {
  if (file === "-") return undefined;
  const info = await stat(file).catch((error: unknown) => {
    throw new LineError(
      `${file}: cannot be read (${error instanceof Error ? error.message : String(error)})`,
    );
  });
  if (!info.isFile()) return undefined;
  let count = 0;
  for await (const { line, text } of numberedLines(file)) {
    parseLine(file, line, text);
    count++;
  }
  return count;
}

export function parseLine(file: string, line: number, text: string): BatchSessionInput {
  let value: unknown;
  try {
    value = JSON.parse(text);
  } catch {
    throw new LineError(`${file}:${line}: not valid JSON`);
  }
  if (value === null || typeof value !== "object" || Array.isArray(value))
    throw new LineError(`${file}:${line}: expected an object ${BATCH_LINE_SHAPE}`);
  return value as BatchSessionInput;
}
