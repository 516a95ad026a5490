/** `fleet resume-point --file HISTORY.json` and `fleet resume-point SESSION_ID`. */
import { createReadStream } from "node:fs";
import type { Readable } from "node:stream";
import { parseArgs } from "node:util";
import { ValidationError } from "../shared/errors.js";
import { findInJson } from "../shared/json-walk.js";
import { formatPath, parseHistory } from "../shared/messages.js";
import { type ResumePointJson, resumePoint, toResumePointJson } from "../shared/resume-point.js";
import { MAX_JSON_DEPTH, tooDeepAt } from "./request-checks.js";

export const EXIT_RESUMABLE = 0;
export const EXIT_NOT_RESUMABLE = 3;

/**
 * The most bytes a history file is read to: 8 times the 32 MiB a session's history holds
 * (MAX_HISTORY_BYTES: seqs, times, usage and escapes around it), and under what one JavaScript
 * string holds (~512 MiB, which the whole text must be to be parsed). Unbounded, `--file
 * /dev/zero` or an endless stdin was read until the machine's memory was gone.
 */
export const MAX_HISTORY_FILE_BYTES = 256 * 1024 * 1024;

async function readHistoryFile(path: string): Promise<unknown> {
  const name = path === "-" ? "stdin" : path;
  let bytes: Buffer | undefined;
  try {
    bytes = await readBounded(path === "-" ? process.stdin : createReadStream(path), MAX_HISTORY_FILE_BYTES);
  } catch (error) {
    const code = (error as NodeJS.ErrnoException).code;
    throw new ValidationError("", `cannot read ${name}: ${code === "ENOENT" ? "no such file" : code}`);
  }
  if (bytes === undefined)
    throw new ValidationError(
      "",
      `${name} is larger than ${MAX_HISTORY_FILE_BYTES / 2 ** 20} MiB, more than any history a session holds; a history file is one JSON array of its messages`,
    );
  const text = jsonText(bytes, name);
  try {
    return JSON.parse(text);
  } catch (error) {
    const reason = (error as Error).message
      .replace(/, ".*$/s, "")
      .split("\n")[0]!
      .slice(0, 200);
    throw new ValidationError("", `${name} is not valid JSON: ${reason}`);
  }
}

/** All of `input`, or undefined (and it is no longer read) once it holds more than `max` bytes. */
async function readBounded(input: Readable, max: number): Promise<Buffer | undefined> {
  const chunks: Buffer[] = [];
  let size = 0;
  try {
    for await (const chunk of input) {
      size += (chunk as Buffer).length;
      if (size > max) return undefined;
      chunks.push(chunk as Buffer);
    }
  } finally {
    input.destroy();
  }
  return Buffer.concat(chunks);
}

/**
 * A history file's bytes as text: JSON is UTF-8 (RFC 8259), decoded strictly, as `fleet session
 * import` reads its file. A leading byte order mark (what Windows editors and PowerShell's
 * `-Encoding utf8` write) is skipped, as RFC 8259 allows; UTF-16 and bytes that are no UTF-8 are
 * refused saying so. Before, a BOM was "not valid JSON: Unexpected token '\uFEFF'" (an invisible
 * character), and bytes that are no UTF-8 were read as U+FFFD and classified, their tool calls'
 * arguments printed with other text than the file's.
 */
export function jsonText(bytes: Buffer, name: string): string {
  if ((bytes[0] === 0xff && bytes[1] === 0xfe) || (bytes[0] === 0xfe && bytes[1] === 0xff))
    throw new ValidationError("", `${name} is UTF-16; JSON must be UTF-8 (save it as UTF-8)`);
  try {
    // `ignoreBOM: false` (the default): a leading U+FEFF is dropped.
    return new TextDecoder("utf-8", { fatal: true }).decode(bytes);
  } catch {
    throw new ValidationError("", `${name} is not valid UTF-8; JSON must be UTF-8`);
  }
}

export function exitCodeFor(point: ResumePointJson): number {
  return point.resumable ? EXIT_RESUMABLE : EXIT_NOT_RESUMABLE;
}

export async function resumePointCommand(args: string[]): Promise<number> {
  let parsed: ReturnType<typeof parse>;
  try {
    parsed = parse(args);
  } catch (error) {
    throw new ValidationError("", (error as Error).message);
  }
  const { values, positionals } = parsed;
  let json: ResumePointJson;
  if (values.file !== undefined) {
    if (positionals.length > 0)
      throw new ValidationError("", "give either --file HISTORY.json or a SESSION_ID, not both");
    const value = await readHistoryFile(values.file);
    // Nesting past MAX_JSON_DEPTH overflowed the stack of the parse below ("Maximum call stack
    // size exceeded"), and JSON.parse reads 1e400 as Infinity, which the resume point would
    // print as null: both refused as the API refuses them in an import.
    const deep = tooDeepAt(value);
    if (deep !== undefined)
      throw new ValidationError(formatPath("messages", deep), `nests deeper than ${MAX_JSON_DEPTH} levels`);
    const infinite = findInJson(value, (item) =>
      typeof item === "number" && !Number.isFinite(item) ? "stop" : undefined,
    );
    if (infinite !== undefined)
      throw new ValidationError(formatPath("messages", infinite), "is a number too large for a JSON double");
    const history = parseHistory(value);
    json = toResumePointJson(resumePoint(history));
  } else if (positionals.length === 1) {
    const { storedResumePoint } = await import("./stored-resume-point.js");
    json = await storedResumePoint(positionals[0]!);
  } else {
    throw new ValidationError(
      "",
      "usage: fleet resume-point --file HISTORY.json | fleet resume-point SESSION_ID",
    );
  }
  console.log(JSON.stringify(json, null, 2));
  return exitCodeFor(json);
}

function parse(args: string[]) {
  return parseArgs({ args, options: { file: { type: "string", short: "f" } }, allowPositionals: true });
}
