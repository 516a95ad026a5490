/**
 * Reading a `fleet session import` file (session-import.ts): a line at a time, once through the
 * check whole, then again as the pages the command sends, checked again.
 */
import { createReadStream } from "node:fs";
import { BODY_LIMIT } from "../producer/request-limits.js";
import type { Spent } from "../shared/imported-spent.js";
import type { ImportSource } from "./import-source.js";
import { ExportFileCheck, ExportFileError, type ExportHeader, type FileMessage } from "./session-file.js";
import { TransferError } from "./session-transfer.js";
import { utf8Lines } from "./utf8-lines.js";

/** The file's lines, numbered from 1, without blank ones; a file that cannot be read is bad input. */
async function* fileLines(file: ImportSource): AsyncGenerator<{ line: number; text: string }> {
  const input = createReadStream(file.path);
  try {
    for await (const item of utf8Lines(input, BODY_LIMIT)) if (item.text.trim() !== "") yield item;
  } catch (error) {
    if (error instanceof ExportFileError) throw error;
    const code = (error as NodeJS.ErrnoException).code;
    throw new TransferError(
      `cannot read ${file.name}: ${code === "ENOENT" ? "no such file" : (code ?? error)}`,
      2,
    );
  } finally {
    input.destroy();
  }
}

/**
 * Reads the whole file through the check; resolves with its number of messages and what its
 * session spent beyond its steps (the creation's `spentOutsideHistory`). `extra`: the metadata
 * the command merges over the file's (the creation's room for messages depends on it).
 */
export async function checkFile(
  file: ImportSource,
  extra: Record<string, unknown> = {},
): Promise<{ total: number; spent?: Spent }> {
  const check = new ExportFileCheck(extra);
  let last = 0;
  let spent: Spent | undefined;
  for await (const { line, text } of fileLines(file)) {
    const item = check.read(line, text);
    if (item.kind === "end") spent = item.spent;
    last = line;
  }
  check.finish(last + 1);
  return { total: check.messages, ...(spent ? { spent } : {}) };
}

/**
 * The file's header, then its messages in the requests that send them (the file read again,
 * checked again): the creation's first — empty when no message fits beside the agent and
 * metadata — then the pages (import-requests.ts).
 */
export async function* filePages(
  file: ImportSource,
  extra: Record<string, unknown> = {},
): AsyncGenerator<{ header: ExportHeader } | { page: FileMessage[] }> {
  const check = new ExportFileCheck(extra);
  let page: FileMessage[] = [];
  let last = 0;
  for await (const { line, text } of fileLines(file)) {
    last = line;
    const item = check.read(line, text);
    if (item.kind === "header") yield { header: item.header };
    if (item.kind !== "message") continue;
    if (item.startsRequest) {
      yield { page };
      page = [];
    }
    page.push(item.message);
  }
  check.finish(last + 1);
  if (page.length > 0) yield { page };
}
