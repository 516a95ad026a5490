/**
 * Where `fleet session import` reads its file from. It reads the file twice (checked whole,
 * then sent), which a pipe cannot give: stdin (`-`, or no FILE with input piped in), a FIFO
 * or `<(fleet session export ID)` is first copied, as it comes, into a file only its owner
 * may read (it holds the conversation, as transcripts do), removed when the command ends.
 */
import { createReadStream, createWriteStream } from "node:fs";
import { mkdtemp, rm, stat } from "node:fs/promises";
import { tmpdir } from "node:os";
import { join } from "node:path";
import type { Readable } from "node:stream";
import { pipeline } from "node:stream/promises";
import { TransferError } from "./session-transfer.js";

/** The stdin the command may read: a stream, and whether it is a terminal. */
export type ImportStdin = Readable & { isTTY?: boolean };

export type ImportSource = {
  /** A regular file to read (twice). */
  path: string;
  /** How messages name it. */
  name: string;
  /** Removes what was copied (nothing for a regular file). */
  done: () => Promise<void>;
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
  if (source === "stdin") return spooled(stdin, "stdin");
  const info = await stat(source.path).catch((error: NodeJS.ErrnoException) => {
    throw new TransferError(
      `cannot read ${source.path}: ${error.code === "ENOENT" ? "no such file" : (error.code ?? error.message)}`,
      2,
    );
  });
  if (info.isFile() || info.isDirectory())
    return { path: source.path, name: source.path, done: async () => {} };
  // A FIFO, /dev/stdin, a character device: read once, as it comes.
  return spooled(createReadStream(source.path), source.path);
}

async function spooled(input: Readable, name: string): Promise<ImportSource> {
  const dir = await mkdtemp(join(tmpdir(), "fleet-import-"));
  const path = join(dir, "session.jsonl");
  const done = () => rm(dir, { recursive: true, force: true });
  try {
    await pipeline(input, createWriteStream(path, { mode: 0o600 }));
  } catch (error) {
    await done();
    const code = (error as NodeJS.ErrnoException).code;
    throw new TransferError(`cannot read ${name}: ${code ?? (error as Error).message}`, 2);
  }
  return { path, name, done };
}
