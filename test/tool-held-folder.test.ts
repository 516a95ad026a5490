/**
 * The file tools open a file in a folder through the folder held open once it was checked
 * inside the tool directory (held-folders.ts), not through a `realpath` of the folder per
 * call. A held folder must never lead a write elsewhere: not once the folder was swapped for a
 * link to a folder outside (whoever else may write in FLEET_TOOL_DIR), not when the swap comes
 * between the check of the held folder and the open through it, not once the folder was
 * removed and made again (the write goes to the new one). And the held folders are bounded.
 */
import { promises as fsPromises, readdirSync } from "node:fs";
import { mkdir, readFile, rename, rm, symlink, writeFile } from "node:fs/promises";
import { syncBuiltinESMExports } from "node:module";
import { join } from "node:path";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { useBuiltinTools } from "./support/builtin-tools.js";
import { waitFor } from "./support/fleet-env.js";

const tools = useBuiltinTools("fleet-held-folder-");

// The test processes import each module once for many files (vitest.config.ts: isolate
// false), so no module is mocked: `open` and `realpath` are wrapped, and the ES module exports
// (which the tools import) synced to them, for this file only (restored in afterAll).
const actualOpen = fsPromises.open;
const actualRealpath = fsPromises.realpath;
/** Run once, right before the next open through a held folder (`/proc/self/fd/N/name`). */
let beforeHeldOpen: (() => Promise<void>) | null = null;
let realpaths = 0;

beforeAll(() => {
  fsPromises.open = (async (...args: Parameters<typeof actualOpen>) => {
    const step = beforeHeldOpen;
    if (step && String(args[0]).startsWith("/proc/self/fd/")) {
      beforeHeldOpen = null;
      await step();
    }
    return actualOpen(...args);
  }) as typeof actualOpen;
  fsPromises.realpath = (async (...args: Parameters<typeof actualRealpath>) => {
    realpaths++;
    return actualRealpath(...args);
  }) as typeof actualRealpath;
  syncBuiltinESMExports();
});

afterAll(() => {
  fsPromises.open = actualOpen;
  fsPromises.realpath = actualRealpath;
  syncBuiltinESMExports();
});

const ARGS = { write_file: { content: "overwritten" }, append_file: { line: "appended" } } as const;

/** `folder` (in the tool directory) made with f.txt, and the outside folder with its own f.txt. */
async function folderAndOutside(name: string): Promise<{ folder: string; outside: string }> {
  const folder = join(tools.toolDir, name);
  const outside = join(tools.base, `outside-${name}`);
  await mkdir(folder);
  await mkdir(outside);
  await writeFile(join(folder, "f.txt"), "inside\n");
  await writeFile(join(outside, "f.txt"), "secret\n");
  return { folder, outside };
}

/** `folder` moved to `folder.moved`, and a link to `outside` put in its place. */
async function swap(folder: string, outside: string): Promise<void> {
  await rename(folder, `${folder}.moved`);
  await symlink(outside, folder);
}

describe("a folder the file tools hold open", () => {
  it("is written in with no realpath per call", async () => {
    await mkdir(join(tools.toolDir, "plain"));
    expect(await tools.call("write_file", { path: "plain/a.txt", content: "a" })).toMatchObject({
      success: true,
    });
    realpaths = 0;
    for (const name of ["b", "c", "d"])
      await tools.call("append_file", { path: `plain/${name}.log`, line: name });
    expect(realpaths).toBe(0);
    expect(await readFile(join(tools.toolDir, "plain", "d.log"), "utf8")).toBe("d\n");
  });

  it.each(["write_file", "append_file"] as const)(
    "%s: swapped for a link outside afterwards, the call is refused and the file outside left alone",
    async (tool) => {
      const { folder, outside } = await folderAndOutside(`later-${tool}`);
      const first = await tools.call(tool, { path: `later-${tool}/f.txt`, ...ARGS[tool] });
      expect(first).toMatchObject({ success: true });
      const inside = await readFile(join(folder, "f.txt"), "utf8");
      await swap(folder, outside);
      const result = await tools.call(tool, { path: `later-${tool}/f.txt`, ...ARGS[tool] });
      expect(result).toEqual({
        success: false,
        content: `Refused: "later-${tool}/f.txt" leads outside the tool directory.`,
      });
      expect(await readFile(join(outside, "f.txt"), "utf8")).toBe("secret\n");
      expect(await readFile(join(`${folder}.moved`, "f.txt"), "utf8")).toBe(inside);
    },
  );

  it.each(["write_file", "append_file"] as const)(
    "%s: swapped between the held folder's check and the open through it, the call is refused and nothing written",
    async (tool) => {
      const { folder, outside } = await folderAndOutside(`between-${tool}`);
      await tools.call(tool, { path: `between-${tool}/f.txt`, ...ARGS[tool] });
      const inside = await readFile(join(folder, "f.txt"), "utf8");
      let swapped = false;
      beforeHeldOpen = async () => {
        await swap(folder, outside);
        swapped = true;
      };
      const result = await tools.call(tool, { path: `between-${tool}/f.txt`, ...ARGS[tool] });
      expect(swapped).toBe(true);
      expect(result).toEqual({
        success: false,
        content: `Refused: "between-${tool}/f.txt" leads outside the tool directory.`,
      });
      expect(await readFile(join(outside, "f.txt"), "utf8")).toBe("secret\n");
      // The open went through the held folder to its moved place: it wrote nothing there either.
      expect(await readFile(join(`${folder}.moved`, "f.txt"), "utf8")).toBe(inside);
    },
  );

  it("removed and made again, is written in anew", async () => {
    const folder = join(tools.toolDir, "remade");
    await mkdir(folder);
    await tools.call("write_file", { path: "remade/a.txt", content: "old" });
    await rm(folder, { recursive: true });
    await mkdir(folder);
    const result = await tools.call("write_file", { path: "remade/b.txt", content: "new" });
    expect(result).toMatchObject({ success: true });
    expect(await readFile(join(folder, "b.txt"), "utf8")).toBe("new");
    // Removed and not made again: the write makes the folder, as it always did.
    await rm(folder, { recursive: true });
    expect(await tools.call("append_file", { path: "remade/c.log", line: "c" })).toMatchObject({
      success: true,
    });
    expect(await readFile(join(folder, "c.log"), "utf8")).toBe("c\n");
  });

  it("holds a bounded number of folders open", async () => {
    const openFds = () => readdirSync("/proc/self/fd").length;
    const before = openFds();
    for (let i = 0; i < 150; i++)
      await tools.call("write_file", { path: `many/f${i}/x.txt`, content: String(i) });
    expect(await readFile(join(tools.toolDir, "many", "f149", "x.txt"), "utf8")).toBe("149");
    // A folder let go is closed on the thread pool, after the call that let it go: waited for.
    await waitFor(() => openFds() - before <= 64, 10_000, "the folders let go to be closed");
  });
});
