/** The built-in tools of contracts.md §5, registered in every worker. */
import { constants, fstatSync, type Stats } from "node:fs";
import { type FileHandle, lstat, mkdir, open, realpath } from "node:fs/promises";
import { basename, dirname, join, relative, resolve } from "node:path";
import { z } from "zod";
import { makeDirectory } from "../../shared/make-directory.js";
import { abortableSleep } from "../models/scripted.js";
import { openInHeldFolder } from "./held-folders.js";
import { leavesRoot, stillInside } from "./opened-inside.js";
import { defineTool, type Tool } from "./registry.js";
import { appendWhole } from "./whole-append.js";

/**
 * O_NOFOLLOW makes the open itself fail (ELOOP) when the last component is a link. O_NONBLOCK
 * makes opening a FIFO with no reader fail (ENXIO) instead of blocking a libuv thread for ever
 * (four such calls took the worker's whole thread pool and hung every file operation after
 * them); anything but a regular file is refused (`openRegular`). O_TRUNC only directly in the
 * root: below it a write truncates once `stillInside` passed.
 */
const WRITE_FLAGS = constants.O_WRONLY | constants.O_CREAT | constants.O_NOFOLLOW | constants.O_NONBLOCK;
const WRITE_IN_ROOT_FLAGS = WRITE_FLAGS | constants.O_TRUNC;
const APPEND_FLAGS =
  constants.O_WRONLY | constants.O_CREAT | constants.O_APPEND | constants.O_NOFOLLOW | constants.O_NONBLOCK;

/** The refusal of a name that is no regular file (a FIFO, a socket, a device). */
function notRegular(path: string): Error {
  return new Error(`Refused: "${path}" is not a regular file.`);
}

/** What a file-system error code means, in the words a model reads. */
const FS_ERRORS: Record<string, string> = {
  EISDIR: "it is a folder",
  ENOTDIR: "a part of it is not a folder",
  ENOENT: "a part of it does not exist",
  EACCES: "permission denied",
  EPERM: "not permitted",
  ENOSPC: "no space left on the device",
  EDQUOT: "the disk quota is used up",
  EROFS: "the file system is read-only",
  ENAMETOOLONG: "the name is too long",
  ELOOP: "it leads through too many links",
  EMFILE: "the worker has too many files open",
  EIO: "an input/output error",
  EFBIG: "the file would grow past the largest size allowed",
};

/**
 * A file system's failure said with the tool's own `path` and the error's code: its message
 * names the absolute path (`EISDIR: …, open '/srv/fleet-files/d'`), which told the model (and
 * whoever reads the session) where the worker keeps its files. Other errors pass as they are.
 */
function saidWithToolPath(error: unknown, path: string, kind: "write" | "append"): unknown {
  const { code, syscall } = (error ?? {}) as NodeJS.ErrnoException;
  if (typeof code !== "string" || typeof syscall !== "string") return error;
  const what = kind === "write" ? "write" : "append to";
  return new Error(`${code}: cannot ${what} "${path}": ${FS_ERRORS[code] ?? `the ${syscall} failed`}.`);
}

/** An open regular file and what `fstat` said of it. */
type Opened = { handle: FileHandle; info: Stats };

/** Opens `file` with `flags`, refusing all but a regular file (`path`: the tool's argument). */
async function openRegular(file: string, path: string, flags: number): Promise<Opened> {
  const handle = await open(file, flags).catch((error: NodeJS.ErrnoException) => {
    if (error.code === "ENXIO") throw notRegular(path);
    throw error;
  });
  return regularOnly(handle, path);
}

/**
 * `handle` when it is a regular file's; else closed, and the refusal thrown. The file is open,
 * so its inode is in memory (on a network file system, the open fetched its attributes): its
 * `fstat` is answered at once, not sent round the thread pool, which cost each tool call a
 * round trip (its latency spread the sessions' writes over more grouped statements).
 */
async function regularOnly(handle: FileHandle, path: string): Promise<Opened> {
  const info = statOf(handle.fd);
  if (!info?.isFile()) {
    await handle.close();
    throw notRegular(path);
  }
  return { handle, info };
}

/** What `fstat` says of an open file, or null when it fails. */
function statOf(fd: number): Stats | null {
  try {
    return fstatSync(fd);
  } catch {
    return null;
  }
}

/**
 * Writes (or appends) `data` to `path` under `root` with the guarantees of `safePath`, cheaply:
 * the file is opened with O_NOFOLLOW inside the real path of its folder, so the kernel refuses a
 * link as the last component and no per-call realpath/lstat of the file is needed. A file directly
 * in the root (the common case) costs no lookup at all, a nested one a single realpath and a
 * read-back of what was opened (`stillInside`). Anything
 * unusual (a link, a missing folder, a failed open) takes the full `safePath` check, so refusals
 * and errors read exactly as before.
 */
export async function writeSafely(
  root: string,
  path: string,
  data: string,
  kind: "write" | "append",
  /** The call's: an append stops waiting for a repair when it is aborted (whole-append.ts). */
  signal?: AbortSignal,
): Promise<void> {
  const target = lexicalTarget(root, path);
  const realRoot = await realRootOf(root);
  const folder = dirname(target);
  const inRoot = folder === resolve(root);
  const flags = kind === "write" ? WRITE_FLAGS : APPEND_FLAGS;
  // A nested file: through its folder held open (held-folders.ts), else by its real path.
  let handle = inRoot ? null : await openInHeldFolder(folder, basename(target), flags, realRoot);
  if (handle === null) {
    const realFolder = inRoot ? realRoot : await realFolderOf(root, path, folder, realRoot);
    // In the root, the one folder on the way is the root (its real path read once per process).
    const firstFlags = inRoot && kind === "write" ? WRITE_IN_ROOT_FLAGS : flags;
    handle = await open(join(realFolder, basename(target)), firstFlags).catch(() => null);
  }
  const byNameInRoot = inRoot && handle !== null;
  let opened: Opened;
  if (handle === null) {
    // Usually ELOOP: the name is a link. The full check follows it, accepting one that resolves
    // inside the root and refusing one leading outside or nowhere; other errors recur as before.
    // The file opened is the link's real target, with the same flags: a link swapped in since
    // is refused (ELOOP), and a FIFO fails at once.
    const checked = await safePath(root, path);
    const real = await realpath(checked).catch(() => checked);
    opened = await openRegular(real, path, flags);
  } else {
    opened = await regularOnly(handle, path);
  }
  if (!byNameInRoot) await stillInside(opened.handle, realRoot, path);
  // An append goes out whole or not at all (whole-append.ts, which closes the handle: a failed
  // append's repair the call stopped waiting for still needs it).
  if (kind === "append")
    return appendWhole(opened.handle, `${opened.info.dev}:${opened.info.ino}`, data, signal);
  try {
    // A new file (the usual write) is empty: no truncation to wait for on the thread pool.
    if (!byNameInRoot && opened.info.size > 0) await opened.handle.truncate(0);
    await opened.handle.writeFile(data);
  } finally {
    await opened.handle.close();
  }
}

/** The real path of `folder` (the lexical parent of `path`'s target), created if missing. */
async function realFolderOf(root: string, path: string, folder: string, realRoot: string): Promise<string> {
  let real = await realpath(folder).catch(() => null);
  if (real === null) {
    // Missing (or broken): the full check refuses a way out through a link, creates the folders
    // and throws the same error as before when it cannot.
    await safePath(root, path);
    real = await realpath(folder);
  }
  if (leavesRoot(relative(realRoot, real))) {
    throw new Error(`Refused: "${path}" leads outside the tool directory.`);
  }
  return real;
}

/**
 * `path` resolved under `root` by name alone, refusing `..`, absolute paths elsewhere, the root
 * itself and a NUL (no file name holds one; Node's own error for it quoted the absolute path).
 */
function lexicalTarget(root: string, path: string): string {
  if (path.includes("\0"))
    throw new Error(`Refused: "${path}" contains a NUL character, which no file name may.`);
  const target = resolve(root, path);
  const rel = relative(root, target);
  if (rel === "" || leavesRoot(rel)) {
    throw new Error(`Refused: "${path}" is outside the tool directory.`);
  }
  return target;
}

/**
 * Resolves `path` under `root`, refusing anything that escapes it (`..`, absolute paths, links).
 * The full check, with a realpath per existing path component probed: `writeSafely` only needs it
 * for links and missing folders.
 */
export async function safePath(root: string, path: string): Promise<string> {
  const target = lexicalTarget(root, path);
  // Follow links before creating anything: the target itself (a link to a file outside)
  // or else its deepest existing ancestor (a link to a directory outside) must resolve
  // inside the root. A dangling link may point anywhere, so it is refused too.
  const realRoot = await realRootOf(root);
  let existing = target;
  for (let probe = target; ; probe = dirname(probe)) {
    const realOf = () =>
      realpath(probe).catch((error: NodeJS.ErrnoException) => {
        if (error.code === "ENOENT") return null;
        throw error;
      });
    let real = await realOf();
    const exists =
      real !== null ||
      (await lstat(probe).then(
        () => true,
        () => false,
      ));
    if (!exists) {
      // The tool directory itself gone (a cleaner of /tmp took it): made again, as at worker
      // start, where its missing real path read as a way outside and refused every call.
      if (probe !== resolve(root)) continue;
      await mkdir(probe, { recursive: true });
    }
    // Missing a moment ago but there now: another call (e.g. a concurrent append) created it
    // in between. Look again; only a link that still resolves nowhere is dangling.
    if (real === null) real = await realOf();
    if (real === null || leavesRoot(relative(realRoot, real))) {
      throw new Error(`Refused: "${path}" leads outside the tool directory.`);
    }
    existing = probe;
    break;
  }
  // Only create folders that are missing (this runs on every file tool call).
  if (existing !== target && existing !== dirname(target)) await mkdir(dirname(target), { recursive: true });
  return target;
}

const realRoots = new Map<string, Promise<string>>();

/** The tool directory's real path, resolved once per process. */
function realRootOf(root: string): Promise<string> {
  let real = realRoots.get(root);
  if (!real) {
    real = realpath(root);
    real.catch(() => realRoots.delete(root));
    realRoots.set(root, real);
  }
  return real;
}

const pathArg = z.string().min(1).max(1024);

export function builtinTools(toolDir: string): Tool[] {
  const ready = makeDirectory(toolDir);
  // Each tool call awaits it and fails with its error; unawaited, a rejection would end the process.
  ready.catch(() => {});
  return [
    defineTool({
      name: "write_file",
      description: "Write a text file (replacing it) under the tool directory.",
      parameters: {
        type: "object",
        properties: { path: { type: "string" }, content: { type: "string" } },
        required: ["path", "content"],
      },
      schema: z.object({ path: pathArg, content: z.string() }),
      async run({ path, content }) {
        await ready;
        await writeSafely(toolDir, path, content, "write").catch((error: unknown) => {
          throw saidWithToolPath(error, path, "write");
        });
        return `wrote ${path}`;
      },
    }),
    defineTool({
      name: "append_file",
      description: "Append one line to a text file under the tool directory.",
      parameters: {
        type: "object",
        properties: { path: { type: "string" }, line: { type: "string" } },
        required: ["path", "line"],
      },
      schema: z.object({ path: pathArg, line: z.string() }),
      async run({ path, line }, { signal }) {
        await ready;
        await writeSafely(toolDir, path, `${line}\n`, "append", signal).catch((error: unknown) => {
          throw saidWithToolPath(error, path, "append");
        });
        return `appended to ${path}`;
      },
    }),
    defineTool({
      name: "sleep",
      description: "Wait for the given number of milliseconds.",
      parameters: { type: "object", properties: { ms: { type: "integer", minimum: 0 } }, required: ["ms"] },
      schema: z.object({ ms: z.number().int().nonnegative().max(3_600_000) }),
      async run({ ms }, { signal }) {
        await abortableSleep(ms, signal);
        return `slept ${ms} ms`;
      },
    }),
    defineTool({
      name: "fail",
      description: "Always fails with the given message.",
      parameters: { type: "object", properties: { message: { type: "string" } }, required: ["message"] },
      schema: z.object({ message: z.string() }),
      async run({ message }) {
        throw new Error(message);
      },
    }),
  ];
}
