/**
 * A folder swapped for a link to a folder outside, between the file tools' check of the
 * folder (its realpath) and their open of the file in it (a TOCTOU race by whoever else may
 * write in FLEET_TOOL_DIR). O_NOFOLLOW guards only the last name of the path, so the open
 * followed the new link: write_file truncated and wrote a file outside, append_file appended
 * to it. Here the swap is made deterministically, right after the tools' realpath of the
 * folder returns; each call must be refused and leave the file outside as it was.
 */
import { promises as fsPromises } from "node:fs";
import { mkdir, mkdtemp, readFile, rename, rm, writeFile } from "node:fs/promises";
import { syncBuiltinESMExports } from "node:module";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { builtinTools } from "../src/worker/tools/builtin.js";
import { executeTool } from "../src/worker/tools/execute-tool.js";

/** Folders (real paths) to swap for a link to `swapTo` once their realpath has been read. */
const swaps = new Map<string, string>();

// The test processes import each module once for many files (vitest.config.ts: isolate
// false), so no module is mocked: the builtin's own `realpath` is wrapped, and its ES module
// exports (which the tools import) synced to it, for this file only (restored in afterAll).
const actualRealpath = fsPromises.realpath;
async function swappingRealpath(path: Parameters<typeof actualRealpath>[0], options?: never) {
  const real = (await actualRealpath(path, options)) as string;
  const target = swaps.get(real);
  if (target !== undefined) {
    swaps.delete(real);
    await rename(real, `${real}.moved`);
    await fsPromises.symlink(target, real);
  }
  return real;
}

let base: string;
let toolDir: string;
let outside: string;
let tools: ReturnType<typeof builtinTools>;

beforeAll(async () => {
  fsPromises.realpath = swappingRealpath as typeof actualRealpath;
  syncBuiltinESMExports();
  base = await mkdtemp(join(tmpdir(), "fleet-folder-swap-"));
  toolDir = join(base, "tools");
  outside = join(base, "outside");
  await mkdir(toolDir, { recursive: true });
  await mkdir(outside);
  tools = builtinTools(toolDir);
});

afterAll(async () => {
  fsPromises.realpath = actualRealpath;
  syncBuiltinESMExports();
  await rm(base, { recursive: true, force: true });
});

function call(name: string, args: Record<string, unknown>) {
  const tool = tools.find((t) => t.name === name);
  return executeTool(tool, name, args, {
    callId: "c",
    callKey: "k",
    sessionId: "s",
    signal: new AbortController().signal,
  });
}

describe("a folder swapped for a link outside between the check and the open", () => {
  it.each([
    ["write_file", { content: "overwritten" }],
    ["append_file", { line: "appended" }],
  ] as const)("%s is refused and leaves the file outside alone", async (name, args) => {
    const folder = join(toolDir, `d-${name}`);
    await mkdir(folder);
    await writeFile(join(folder, "f.txt"), "inside\n");
    await writeFile(join(outside, "f.txt"), "secret\n");
    // The tool directory's own realpath is read once per process: read it before the swap.
    await call(name, { path: "warm.txt", ...args });
    swaps.set(await actualRealpath(folder), outside);
    const result = await call(name, { path: `d-${name}/f.txt`, ...args });
    expect(swaps.size).toBe(0);
    expect(result).toEqual({
      success: false,
      content: `Refused: "d-${name}/f.txt" leads outside the tool directory.`,
    });
    expect(await readFile(join(outside, "f.txt"), "utf8")).toBe("secret\n");
    // Put back for the next case.
    await rm(folder);
    await rename(`${folder}.moved`, folder);
  });
});
