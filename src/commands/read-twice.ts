/**
 * A file a command reads twice — checked whole, then sent — so that bad input anywhere in it
 * is found before anything is created (`fleet session import`, `fleet batch submit`). A pipe
 * cannot be read twice: stdin, a FIFO, `<(…)` or a character device is first copied, as it
 * comes, into a file only its owner may read (it holds conversations and agents' prompts),
 * removed when the command ends, also by a signal (interrupt.ts). The copy streams: memory holds a chunk, whatever the input's
 * size.
 */
import { createReadStream, createWriteStream, rmSync } from "node:fs";
import { mkdtemp, rm, stat } from "node:fs/promises";
import { tmpdir } from "node:os";
import { join } from "node:path";
import type { Readable } from "node:stream";
import { pipeline } from "node:stream/promises";
import { onInterrupt } from "./interrupt.js";

export type TwiceReadable = {
  /** A path to read as often as needed. */
  path: string;
  /** Removes the copy (nothing for a file read in place); call it once the command is done. */
  done: () => Promise<void>;
};

/** How a command says that its input could not be read: its own error (and exit code). */
export type ReadFailure = (error: NodeJS.ErrnoException) => Error;

/**
 * The chunks of `source` up to and including the first `maxLineBytes + 1` bytes of its first
 * line longer than `maxLineBytes`, where it stops reading (pure over its input). The lines
 * before it are whole, so reading the copy finds them as they came, then that line too long.
 */
export async function* untilOverlongLine(
  source: AsyncIterable<Buffer>,
  maxLineBytes: number,
): AsyncGenerator<Buffer> {
  /** Bytes of the line being read, before this chunk. */
  let line = 0;
  for await (const chunk of source) {
    let from = 0;
    for (;;) {
      const newline = chunk.indexOf(0x0a, from);
      const length = (newline === -1 ? chunk.length : newline) - from;
      if (line + length > maxLineBytes) {
        yield chunk.subarray(0, from + (maxLineBytes - line) + 1);
        return;
      }
      if (newline === -1) {
        line += length;
        break;
      }
      line = 0;
      from = newline + 1;
    }
    yield chunk;
  }
}

/**
 * `input` (read once) copied into a private temporary file; on failure nothing is left. The
 * copy stops after the first line past `maxLineBytes` (what the command refuses a line for):
 * an input that never ends (`/dev/zero`, one endless line piped in) was copied until the disk
 * was full, to be refused for its first line afterwards.
 */
export async function copyOf(
  input: Readable,
  failed: ReadFailure,
  maxLineBytes: number,
): Promise<TwiceReadable> {
  const dir = await mkdtemp(join(tmpdir(), "fleet-input-"));
  const path = join(dir, "input.jsonl");
  // Removed also when Ctrl-C or SIGTERM stops the command, which runs no `finally`.
  const forget = onInterrupt(() => {
    rmSync(dir, { recursive: true, force: true });
    return undefined;
  });
  const done = async () => {
    await rm(dir, { recursive: true, force: true });
    forget();
  };
  try {
    await pipeline(
      input,
      (source: AsyncIterable<Buffer>) => untilOverlongLine(source, maxLineBytes),
      createWriteStream(path, { mode: 0o600 }),
    );
  } catch (error) {
    await done();
    throw failed(error as NodeJS.ErrnoException);
  }
  return { path, done };
}

/**
 * `path` read in place when it is a regular file (or a folder: reading it says so, as the
 * command words it); anything else — a FIFO, /dev/stdin — copied first (copyOf). A path that
 * cannot be stat'ed is `failed`.
 */
export async function readTwice(
  path: string,
  failed: ReadFailure,
  maxLineBytes: number,
): Promise<TwiceReadable> {
  const info = await stat(path).catch((error: NodeJS.ErrnoException) => {
    throw failed(error);
  });
  if (info.isFile() || info.isDirectory()) return { path, done: async () => {} };
  return copyOf(createReadStream(path), failed, maxLineBytes);
}
