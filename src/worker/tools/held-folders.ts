/**
 * The folders below the tool directory that the file tools write in, each held open once its
 * real path was checked inside the root, so that a file in it is opened through the held
 * descriptor (Linux's `/proc/self/fd/N/name`: an `openat` in effect) instead of a `realpath` of
 * the folder per call (builtin.ts `writeSafely`). That `realpath` was a thread-pool round trip
 * per nested write, 2.6 % of a worker's main-thread samples in `npm run bench` and as much
 * again on the pool; a cache of real paths instead would have followed a folder swapped for a
 * link later (docs/performance.md).
 *
 * What makes it safe against a swap: the open goes through the folder's own inode, whatever
 * its path leads to now, so a folder (or one above it) swapped for a link to outside cannot
 * take the open there. Before each open, the descriptor's path must still be the one checked
 * (not moved, not removed: `/proc` says `… (deleted)`); after it, what was opened must be that
 * path and the name, else the handle is closed, the folder let go, and the caller takes the
 * full check as before. A folder moved away within the microseconds between those two reads
 * may get the file created in it where it went (the same race the `realpath` check had, but
 * inside the folder that was checked, not where a link points).
 *
 * At most MAX_HELD folders a process, the least recently used let go first; a folder let go
 * while an open goes through it is closed once that open is done.
 */
import { constants } from "node:fs";
import { type FileHandle, open, realpath } from "node:fs/promises";
import { join, relative } from "node:path";
import { leavesRoot, procLink } from "./opened-inside.js";

/** Distinct folders held open by a process (one descriptor each). */
const MAX_HELD = 64;

type Held = {
  key: string;
  handle: FileHandle;
  /** Its real path when it was checked inside the root. */
  real: string;
  /** Opens under way through it. */
  users: number;
  dropped: boolean;
  closed: boolean;
};

/** Per root and folder, the most recently used last; null: it could not be held. */
const slots = new Map<string, { ready: Promise<Held | null>; held: Held | null }>();
/** Off where `/proc/self/fd` does not answer (not Linux, or no /proc): every call takes the `realpath`. */
let usable = process.platform === "linux";

/**
 * `name` in `folder` (an absolute path below `realRoot`'s lexical root) opened with `flags`
 * through the folder held open, or null: the folder could not be held (missing, outside the
 * root, no /proc), or the open failed or was not where it should be. Null says nothing: the
 * caller checks and opens by path as before, and its errors and refusals are the ones given.
 */
export async function openInHeldFolder(
  folder: string,
  name: string,
  flags: number,
  realRoot: string,
): Promise<FileHandle | null> {
  if (!usable) return null;
  const held = await holdOf(folder, realRoot);
  if (held === null) return null;
  if (held.dropped || procLink(held.handle.fd) !== held.real) {
    letGo(held);
    return null;
  }
  held.users++;
  let handle: FileHandle | null;
  try {
    handle = await open(`/proc/self/fd/${held.handle.fd}/${name}`, flags).catch(() => null);
  } finally {
    held.users--;
    closeIfDone(held);
  }
  if (handle === null) {
    // Usually a link as the name (ELOOP) or a folder removed since: the full check decides.
    letGo(held);
    return null;
  }
  if (procLink(handle.fd) !== join(held.real, name)) {
    await handle.close();
    letGo(held);
    return null;
  }
  return handle;
}

function holdOf(folder: string, realRoot: string): Promise<Held | null> {
  const key = `${realRoot}\0${folder}`;
  const kept = slots.get(key);
  if (kept) {
    slots.delete(key);
    slots.set(key, kept);
    return kept.ready;
  }
  const slot: { ready: Promise<Held | null>; held: Held | null } = {
    ready: takeHold(key, folder, realRoot),
    held: null,
  };
  slots.set(key, slot);
  void slot.ready.then((held) => {
    if (held !== null) slot.held = held;
    else if (slots.get(key) === slot) slots.delete(key);
  });
  if (slots.size > MAX_HELD) {
    const [oldestKey, oldest] = slots.entries().next().value as [string, typeof slot];
    slots.delete(oldestKey);
    void oldest.ready.then((held) => held && letGo(held));
  }
  return slot.ready;
}

/** `folder` opened and checked inside the root, or null (then nothing is left open). */
async function takeHold(key: string, folder: string, realRoot: string): Promise<Held | null> {
  const handle = await open(folder, constants.O_RDONLY | constants.O_DIRECTORY).catch(() => null);
  if (handle === null) return null;
  const real = procLink(handle.fd);
  if (real === null) usable = false;
  // Read once a folder, after the open: a folder moved (or swapped for a link) between the two
  // is not held, or the held one would be the moved folder; the caller's own check decides.
  const realNow = real === null ? null : await realpath(folder).catch(() => null);
  if (real === null || realNow !== real || leavesRoot(relative(realRoot, real))) {
    await handle.close().catch(() => {});
    return null;
  }
  return { key, handle, real, users: 0, dropped: false, closed: false };
}

/** Stops using `held`: out of the map, closed once no open goes through it. */
function letGo(held: Held): void {
  const slot = slots.get(held.key);
  if (slot?.held === held) slots.delete(held.key);
  held.dropped = true;
  closeIfDone(held);
}

function closeIfDone(held: Held): void {
  if (!held.dropped || held.users > 0 || held.closed) return;
  held.closed = true;
  void held.handle.close().catch(() => {});
}
