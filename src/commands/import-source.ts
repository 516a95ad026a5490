/**
 * Where `fleet session import` reads its file from. It reads the file twice (checked whole,
 * then sent), which a pipe cannot give: stdin (`-`, or no FILE with input piped in), a FIFO
 * or `<(fleet session export ID)` is first copied (read-twice.ts), removed when the command
 * ends.
 */
import type { Readable } from "node:stream";
import { BODY_LIMIT } from "../producer/request-limits.js";
import { copyOf, type ReadFailure, readTwice, type TwiceReadable } from "./read-twice.js";
import { TransferError } from "./session-transfer.js";

/** The stdin the command may read: a stream, and whether it is a terminal. */
export type ImportStdin = Readable & { isTTY?: boolean };

export type ImportSource = TwiceReadable & {
  /** How messages name it. */
  name: string;
};

/** What FILE names (pure): stdin, or a path. No FILE reads stdin unless it is a terminal. */
export function sourceOf(file: string | undefined, stdinIsTerminal: boolean): "stdin" | { path: string } {
  if (file === "-") return "stdin";
  if (file !== undefined) return { path: file };
  if (stdinIsTerminal)
    throw new TransferError(
      "give the FILE `fleet session export` wrote, or `-` (or a pipe) to read it from stdin",
      2,
    );
  return "stdin";
}

export async function openImportSource(file: string | undefined, stdin: ImportStdin): Promise<ImportSource> {
  const source = sourceOf(file, stdin.isTTY === true);
  const name = source === "stdin" ? "stdin" : source.path;
  const failed: ReadFailure = (error) =>
    new TransferError(
      `cannot read ${name}: ${error.code === "ENOENT" ? "no such file" : (error.code ?? error.message)}`,
      2,
    );
  // Each line is at most what one request may hold (session-import-file.ts): the copy stops past it.
  const readable = await (source === "stdin"
    ? copyOf(stdin, failed, BODY_LIMIT)
    : readTwice(source.path, failed, BODY_LIMIT));
  return { ...readable, name };
}
