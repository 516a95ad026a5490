/**
 * `mkdir -p` with a bound. Node 20's `mkdir(dir, { recursive: true })` never settles for a
 * path under a directory that answers ENOENT to mkdir although it exists, such as
 * `/proc/nope` (it retries the same component for ever); a worker with
 * `FLEET_TOOL_DIR=/proc/nope` hung at start instead of saying what is wrong. This walks up
 * the path itself, one mkdir per component at most twice, and rejects with the last error.
 * `mode` (before the umask) is given to every directory this creates, the missing parents
 * too; a directory that exists already keeps its mode.
 */
import { mkdir, stat } from "node:fs/promises";
import { dirname, resolve } from "node:path";

/** The mode of a directory made for what only this fleet's user may read (transcripts). */
export const PRIVATE_DIRECTORY_MODE = 0o700;

/** Creates `dir` and any missing parent; rejects (ENOENT, ENOTDIR, EACCES, …) when it cannot. */
export async function makeDirectory(dir: string, mode = 0o777): Promise<void> {
  const target = resolve(dir);
  try {
    await mkdir(target, { mode });
    return;
  } catch (error) {
    const code = (error as NodeJS.ErrnoException).code;
    if (code === "EEXIST") return existingDirectory(target, error);
    if (code !== "ENOENT") throw error;
  }
  const parent = dirname(target);
  // The root itself answered ENOENT: nothing above it to create.
  if (parent === target)
    throw Object.assign(new Error(`ENOENT: cannot create ${target}`), { code: "ENOENT" });
  await makeDirectory(parent, mode);
  // The parent exists now: a second ENOENT (a /proc-like parent) is final.
  try {
    await mkdir(target, { mode });
  } catch (error) {
    if ((error as NodeJS.ErrnoException).code === "EEXIST") return existingDirectory(target, error);
    throw error;
  }
}

/** EEXIST is success only for a directory (a file there is ENOTDIR, as `mkdir -p` says). */
async function existingDirectory(target: string, error: unknown): Promise<void> {
  const found = await stat(target).catch(() => undefined);
  if (found?.isDirectory()) return;
  throw Object.assign(new Error(`ENOTDIR: not a directory, mkdir '${target}'`), {
    code: "ENOTDIR",
    cause: error,
  });
}
