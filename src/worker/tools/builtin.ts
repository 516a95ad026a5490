/** The built-in tools of contracts.md §5, registered in every worker. */
import { appendFile, lstat, mkdir, realpath, writeFile } from "node:fs/promises";
import { dirname, isAbsolute, relative, resolve } from "node:path";
import { z } from "zod";
import { abortableSleep } from "../models/scripted.js";
import { defineTool, type Tool } from "./registry.js";

/** Resolves `path` under `root`, refusing anything that escapes it (`..`, absolute paths, links). */
export async function safePath(root: string, path: string): Promise<string> {
  const target = resolve(root, path);
  const rel = relative(root, target);
  if (rel === "" || rel.startsWith("..") || isAbsolute(rel)) {
    throw new Error(`Refused: "${path}" is outside the tool directory.`);
  }
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
    if (!exists) continue;
    // Missing a moment ago but there now: another call (e.g. a concurrent append) created it
    // in between. Look again; only a link that still resolves nowhere is dangling.
    if (real === null) real = await realOf();
    const relReal = real === null ? ".." : relative(realRoot, real);
    if (relReal.startsWith("..") || isAbsolute(relReal)) {
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
  const ready = mkdir(toolDir, { recursive: true });
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
        await writeFile(await safePath(toolDir, path), content);
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
      async run({ path, line }) {
        await ready;
        await appendFile(await safePath(toolDir, path), `${line}\n`);
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
