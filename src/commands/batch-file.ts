/**
 * The JSON Lines file `fleet batch submit` reads (batch.ts): where it is read from, its lines,
 * numbered, each read as a session, and the error that names a bad one.
 */
import { createReadStream } from "node:fs";
import type { Readable } from "node:stream";
import type { BatchSessionInput } from "../producer/client.js";
import { batchItem, parseBody } from "../producer/request-bodies.js";
import { BODY_LIMIT, MAX_REQUEST_MESSAGES } from "../producer/request-limits.js";
import { ValidationError } from "../shared/errors.js";
import { ParsedAgents } from "../shared/parsed-agents.js";
import { BATCH_LINE_SHAPE } from "./batch-line.js";
import { copyOf, type ReadFailure, readTwice, type TwiceReadable } from "./read-twice.js";
import { ExportFileError } from "./session-file.js";
import { utf8Lines } from "./utf8-lines.js";

/** An input line that is not a session: names the file's line (exit 2). */
export class LineError extends Error {}

/** The file `submit` reads twice (checked whole, then sent), and how its errors name it. */
export type BatchFile = TwiceReadable & {
  /** FILE as given, or `stdin` for `-`. */
  name: string;
};

/**
 * FILE read twice (read-twice.ts): a regular file in place; stdin (`-`), a FIFO or `<(…)`
 * copied first. Read as it came, a bad line far into stdin was found after the parts before
 * it were created and started (the command then cancelled the batch).
 */
export async function openBatchFile(file: string, stdin: Readable): Promise<BatchFile> {
  const name = file === "-" ? "stdin" : file;
  const failed: ReadFailure = (error) => new LineError(`${name}: cannot be read (${error.message})`);
  const readable = await (file === "-"
    ? copyOf(stdin, failed, BODY_LIMIT)
    : readTwice(file, failed, BODY_LIMIT));
  return { ...readable, name };
}

/**
 * Lines of the file, numbered from 1, without blank ones; each decoded as UTF-8 strictly
 * (utf8Lines) and at most what one request may hold. Read leniently, a byte that is no UTF-8
 * became U+FFFD and the batch was submitted with other text than the file's.
 */
export async function* numberedLines(file: BatchFile): AsyncGenerator<{ line: number; text: string }> {
  const input = createReadStream(file.path);
  try {
    for await (const item of utf8Lines(input, BODY_LIMIT, "a JSON Lines file is UTF-8"))
      if (item.text.trim() !== "") yield item;
  } catch (error) {
    if (error instanceof ExportFileError) throw new LineError(`${file.name}:${error.line}: ${error.message}`);
    // What stat could not tell (a folder): one line naming the file.
    if ((error as NodeJS.ErrnoException).syscall !== undefined)
      throw new LineError(`${file.name}: cannot be read (${(error as Error).message})`);
    throw error;
  } finally {
    input.destroy();
  }
}

/**
 * The sessions the file holds, each line read as `submit` will send it, so that a bad line (or
 * a customId given twice) is named before any part is sent.
 */
export async function checkLines(file: BatchFile): Promise<number> {
  let count = 0;
  /** customId → the line that gave it first. */
  const customIds = new Map<string, number>();
  // A batch's lines mostly share one agent: each distinct one is parsed once.
  const agents = new ParsedAgents();
  for await (const { line, text } of numberedLines(file)) {
    const session = parseLine(file.name, line, text);
    checkSession(file.name, line, session, agents);
    const { customId } = session;
    if (typeof customId === "string") {
      const first = customIds.get(customId);
      if (first !== undefined) throw repeatedCustomId(file.name, line, customId, first);
      customIds.set(customId, line);
    }
    count++;
  }
  return count;
}

/**
 * The most bytes of sessions one part carries (its lines as the file holds them): half the API's
 * body limit, as session imports' pages. A part of 1,000 sessions of 20 KB each was a body of
 * 20 MB, answered 413 (the first part ended the command; a later one cancelled the batch).
 */
export const PART_BYTES = BODY_LIMIT / 2;

/**
 * Whether the next line (`bytes` long, importing `messages`) starts a new part after a part of
 * `count` sessions, `bytes` bytes and `messages` imported messages, `size` sessions at most
 * (pure). The API imports at most MAX_REQUEST_MESSAGES a request: 600 sessions carrying on
 * conversations of 100 messages were one part of 60,000, refused whole (400). A part always
 * takes its first line.
 */
export function startsNewPart(
  part: { count: number; bytes: number; messages: number },
  next: { bytes: number; messages: number },
  size: number,
): boolean {
  if (part.count === 0) return false;
  return (
    part.count >= size ||
    part.bytes + next.bytes > PART_BYTES ||
    part.messages + next.messages > MAX_REQUEST_MESSAGES
  );
}

/**
 * A customId given again (contracts §9: unique within a batch), named before anything is sent.
 * Found by the API only in the part that held it, after the parts before were created and
 * started: the command then cancelled the batch (1,000 sessions of 1,200 run for nothing).
 */
function repeatedCustomId(file: string, line: number, customId: string, first: number): LineError {
  return new LineError(
    `${file}:${line}: customId ${JSON.stringify(customId)} repeats line ${first}'s; customIds are unique within a batch`,
  );
}

/**
 * A line read as the API reads a batch's session (request-bodies.ts `batchItem`: its fields,
 * its input, customId and metadata; its agent, as agent-config.ts parses one), so that one it
 * would refuse is named before any part is sent. Before, only JSON and repeated customIds were
 * checked here: a later part's bad line (a misspelt field, no agent, a provider that does not
 * exist) was refused by the API after the parts before had been created and started, and the
 * batch cancelled. What depends on the fleet (its endpoints, tools, prices) is still the API's.
 */
function checkSession(file: string, line: number, session: BatchSessionInput, agents: ParsedAgents): void {
  try {
    parseBody(batchItem, session);
    agents.parse(session.agent, "agent");
  } catch (error) {
    if (error instanceof ValidationError) throw new LineError(`${file}:${line}: ${error.message}`);
    throw error;
  }
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
