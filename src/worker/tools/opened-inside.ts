/**
 * Whether what the file tools opened is inside the tool directory (builtin.ts `writeSafely`).
 * O_NOFOLLOW guards only a path's last name: a folder on the way swapped for a link after its
 * real path was checked took the open outside, and a write truncated and wrote a file there.
 */
import { readlinkSync } from "node:fs";
import type { FileHandle } from "node:fs/promises";
import { isAbsolute, relative, sep } from "node:path";

/**
 * Refuses (closing it) a file opened outside the root: O_NOFOLLOW guards only the last name, so
 * a folder swapped for a link after its realpath took the open outside. What the kernel opened
 * is read back (Linux's /proc/self/fd; elsewhere the check before the open is all there is).
 */
export async function stillInside(handle: FileHandle, realRoot: string, path: string): Promise<void> {
  // Read at once, not on the thread pool: procfs answers from memory, and a round trip per
  // call there cost the worker ~10 % of its CPU in `npm run bench` (its grouped writes spread).
  const opened = procLink(handle.fd);
  if (opened === null || !leavesRoot(relative(realRoot, opened))) return;
  await handle.close();
  throw new Error(`Refused: "${path}" leads outside the tool directory.`);
}

/** What the kernel says `fd` is open on (Linux's /proc/self/fd), or null where it cannot say. */
export function procLink(fd: number): string | null {
  try {
    return readlinkSync(`/proc/self/fd/${fd}`);
  } catch {
    return null;
  }
}

/**
 * Whether a path relative to the root (`relative`'s) leads out of it: `..` or through it, or
 * another drive. A name that only begins with two dots (`..notes`, `...`) is inside: such names
 * were refused as outside the tool directory.
 */
export function leavesRoot(rel: string): boolean {
  return rel === ".." || rel.startsWith(`..${sep}`) || isAbsolute(rel);
}
