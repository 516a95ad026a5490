/**
 * `append_file`'s write (builtin.ts) and the transcript's (transcript-extension.ts): a whole
 * line or nothing.
 *
 * `FileHandle.writeFile` wrote in 512 KiB pieces and stopped at the first error, so a write cut
 * by the file system (a full disk, a file-size limit) left part of the line, and the model's
 * retry appended after half a line; and two appends to one file at once took turns piece by
 * piece. Here a line goes out in one `write` (O_APPEND: at the end), looping only on a short
 * write, and whatever went out before an error is cut off again when the file still ends with
 * it (another append's bytes after it would be cut instead: then it stays).
 *
 * Appends to one file do not wait for each other: one `write` of an O_APPEND file is not
 * interleaved with another's on Linux's local file systems, which hold the file's lock for the
 * whole call (a network file system may still mix them). Only a failed append's repair waits:
 * for the appends of this process to that file (device and inode: also through a link) still
 * under way, and new ones wait for it, so that it reads the file's tail and cuts it with no
 * append of this process in between. An append by another process in between makes the tail
 * another's, and the part stays, as it did before.
 */
import { constants } from "node:fs";
import { type FileHandle, open } from "node:fs/promises";

/** The appends of this process under way to one file, and its repair, if one is pending. */
type FileAppends = { inFlight: number; drained: (() => void)[]; repair: Promise<void> | null };

/** Per file (`dev:ino`, or a path): present while an append or a repair is under way. */
const files = new Map<string, FileAppends>();

/**
 * Appends `data` to the file open in `handle` (O_APPEND) whole or not at all, and closes the
 * handle. `key` names the file (`dev:ino`, or its path) among the appends of this process.
 *
 * `signal` (the tool call's) stops the waits, never a write: a call aborted while it waits for
 * another append's repair appends nothing and throws; one aborted while its own failed append
 * waits for its repair throws that failure at once, and the repair goes on without it (new
 * appends still wait for it), keeping the handle open until it is done, so the part it cuts off
 * is cut off all the same. Before, a cancelled or timed-out call went on waiting there.
 */
export async function appendWhole(
  handle: FileHandle,
  key: string,
  data: string,
  signal?: AbortSignal,
): Promise<void> {
  const left: { repair: Promise<void> | null } = { repair: null };
  try {
    await append(handle, key, data, signal, left);
  } finally {
    // A repair the call stopped waiting for needs the handle still: it closes it when done.
    if (left.repair) void left.repair.then(() => handle.close()).catch(() => {});
    else await handle.close();
  }
}

async function append(
  handle: FileHandle,
  key: string,
  data: string,
  signal: AbortSignal | undefined,
  /** Set to this append's repair when the call stopped waiting for it. */
  left: { repair: Promise<void> | null },
): Promise<void> {
  let file = files.get(key);
  while (file?.repair) {
    if (!(await doneUnlessAborted(file.repair, signal)))
      throw new Error(
        `nothing was appended: the call was stopped (${reasonText(signal)}) while it waited for the repair of another append to the file`,
      );
    file = files.get(key);
  }
  if (!file) {
    file = { inFlight: 0, drained: [], repair: null };
    files.set(key, file);
  }
  file.inFlight++;
  const bytes = Buffer.from(data);
  let written = 0;
  try {
    while (written < bytes.length) {
      const { bytesWritten } = await handle.write(bytes, written, bytes.length - written);
      // A regular file's write takes at least one byte or fails; never loop on nothing.
      if (bytesWritten <= 0)
        throw Object.assign(new Error("write took nothing"), { code: "EIO", syscall: "write" });
      written += bytesWritten;
    }
  } catch (error) {
    // Set before this append leaves, so that no other starts until the repair is done.
    const repair = written > 0 ? startRepair(key, file, handle, bytes.subarray(0, written)) : null;
    leave(key, file);
    if (repair && !(await doneUnlessAborted(repair, signal))) left.repair = repair;
    throw error;
  }
  leave(key, file);
}

/** True once `work` (which never rejects) is done; false if `signal` is aborted first. */
function doneUnlessAborted(work: Promise<void>, signal: AbortSignal | undefined): Promise<boolean> {
  if (!signal) return work.then(() => true);
  if (signal.aborted) return Promise.resolve(false);
  return new Promise<boolean>((resolve) => {
    const onAbort = () => resolve(false);
    signal.addEventListener("abort", onAbort, { once: true });
    void work.then(() => {
      signal.removeEventListener("abort", onAbort);
      resolve(true);
    });
  });
}

function reasonText(signal: AbortSignal | undefined): string {
  const reason: unknown = signal?.reason;
  return reason instanceof Error ? reason.message : reason === undefined ? "aborted" : String(reason);
}

function leave(key: string, file: FileAppends): void {
  file.inFlight--;
  if (file.inFlight > 0) return;
  for (const drained of file.drained.splice(0)) drained();
  if (!file.repair && files.get(key) === file) files.delete(key);
}

/**
 * Cuts `mine` (the part of a failed append that went out) off the file's end, after the appends
 * of this process to the file under way have ended and after any repair before it; new appends
 * wait for it (`file.repair`). Never fails: a repair that cannot be made leaves the part.
 */
function startRepair(key: string, file: FileAppends, handle: FileHandle, mine: Buffer): Promise<void> {
  const before = file.repair ?? Promise.resolve();
  const repair: Promise<void> = before
    .then(async () => {
      // This append has left by now (leave runs right after this is set up), others may not.
      while (file.inFlight > 0) await new Promise<void>((resolve) => file.drained.push(resolve));
      await cutTail(handle, mine);
    })
    .catch(() => {})
    .finally(() => {
      if (file.repair !== repair) return;
      file.repair = null;
      if (file.inFlight === 0 && files.get(key) === file) files.delete(key);
    });
  file.repair = repair;
  return repair;
}

/** Cuts `mine` off the end of the file open in `handle` when the file ends with it. */
async function cutTail(handle: FileHandle, mine: Buffer): Promise<void> {
  const { size } = await handle.stat();
  if (size < mine.length) return;
  // The handle is open for writing only: the tail is read through another open of the same
  // file (Linux's /proc/self/fd; elsewhere the part stays).
  const reader = await open(`/proc/self/fd/${handle.fd}`, constants.O_RDONLY | constants.O_NONBLOCK);
  try {
    const tail = Buffer.alloc(mine.length);
    const { bytesRead } = await reader.read(tail, 0, mine.length, size - mine.length);
    if (bytesRead === mine.length && tail.equals(mine)) await handle.truncate(size - mine.length);
  } finally {
    await reader.close();
  }
}
