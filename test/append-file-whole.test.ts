/**
 * The built-in `append_file` appends a whole line or nothing. It wrote with
 * `FileHandle.writeFile`, which writes in 512 KiB pieces and stops at the first error: a write
 * cut by the file system (here a real one, the file-size limit of `ulimit -f` in a child
 * process: the kernel writes up to the limit, then refuses the rest with EFBIG) left the part
 * written, so the file ended in half a line, and the model's retry (or a resume's) appended
 * after it. And two appends of more than 512 KiB to one file at once (two calls of one step, two
 * sessions sharing the tool directory) took turns piece by piece: each line came out cut in two
 * by the other's. A failed append next to another in the same process must tell its own part
 * from the other's line: it cuts the file's end only when that is its part.
 */
import { readFile, writeFile } from "node:fs/promises";
import { join } from "node:path";
import { pathToFileURL } from "node:url";
import { describe, expect, it } from "vitest";
import { useBuiltinTools } from "./support/builtin-tools.js";
import { underFileSizeLimit } from "./support/file-size-limit.js";
import { ROOT } from "./support/fleet-env.js";

const fixture = useBuiltinTools("fleet-append-whole-");
const { call } = fixture;

/**
 * `append_file` calls made at once, in this order, in a child process whose files may grow to
 * `limitKiB` KiB at most; their outcomes.
 */
function appendUnderLimit(
  limitKiB: number,
  path: string,
  lines: string[],
): { success: boolean; content: string }[] {
  const builtin = pathToFileURL(join(ROOT, "src/worker/tools/builtin.ts")).href;
  const tools = pathToFileURL(join(ROOT, "src/worker/tools/registry.ts")).href;
  const execute = pathToFileURL(join(ROOT, "src/worker/tools/execute-tool.ts")).href;
  const script = `
    const { builtinTools } = await import(${JSON.stringify(builtin)});
    const { ToolRegistry } = await import(${JSON.stringify(tools)});
    const { executeTool } = await import(${JSON.stringify(execute)});
    const registry = new ToolRegistry().register(...builtinTools(${JSON.stringify(fixture.toolDir)}));
    const context = { callId: "c", callKey: "k", sessionId: "s", signal: new AbortController().signal };
    const append = (line) => executeTool(registry.get("append_file"), "append_file", { path: ${JSON.stringify(path)}, line }, context);
    console.log(JSON.stringify(await Promise.all(${JSON.stringify(lines)}.map(append))));`;
  return underFileSizeLimit(limitKiB, script);
}

describe("append_file", () => {
  it("cut by the file system leaves the file as it was (no half line), and says why", async () => {
    const file = join(fixture.toolDir, "log.txt");
    await writeFile(file, "first line\n");
    // 1 KiB allowed: the kernel takes the first 1013 bytes of the 3001, then refuses (EFBIG).
    const [outcome] = appendUnderLimit(1, "log.txt", ["b".repeat(3000)]);
    expect(outcome!.success).toBe(false);
    expect(outcome!.content).toBe(
      'EFBIG: cannot append to "log.txt": the file would grow past the largest size allowed.',
    );
    // Before: "first line\n" followed by 1013 b's and no newline.
    expect(await readFile(file, "utf8")).toBe("first line\n");
    // The retry (here without the limit) appends after a whole line.
    expect(await call("append_file", { path: "log.txt", line: "second" })).toEqual({
      success: true,
      content: "appended to log.txt",
    });
    expect(await readFile(file, "utf8")).toBe("first line\nsecond\n");
  }, 60_000);

  it("cut beside another append to the file in the same process: that line whole, no half line", async () => {
    const file = join(fixture.toolDir, "two.txt");
    await writeFile(file, "first line\n");
    // Started together: the short line first, then one the limit cuts. They do not wait for
    // each other, so either may reach the file first: the short one fits or, behind the long
    // one's part, is refused too. Either way each line is whole or absent, and a line is there
    // exactly when its call said so.
    const [short, long] = appendUnderLimit(1, "two.txt", ["second", "b".repeat(3000)]);
    expect(long!.success).toBe(false);
    expect([
      { success: true, content: "appended to two.txt" },
      {
        success: false,
        content: 'EFBIG: cannot append to "two.txt": the file would grow past the largest size allowed.',
      },
    ]).toContainEqual(short);
    // Before (the long one measured the file, then the short one went in): it could not tell
    // its own bytes from the file's and left 1006 b's there.
    expect(await readFile(file, "utf8")).toBe(short!.success ? "first line\nsecond\n" : "first line\n");
  }, 60_000);

  it("of lines over 512 KiB, four at once to one file: each line whole, one after another", async () => {
    const size = 1_500_000;
    const letters = ["w", "x", "y", "z"];
    const outcomes = await Promise.all(
      letters.map((letter) => call("append_file", { path: "big.txt", line: letter.repeat(size) })),
    );
    expect(outcomes.every((outcome) => outcome.success)).toBe(true);
    const lines = (await readFile(join(fixture.toolDir, "big.txt"), "utf8")).split("\n");
    expect(lines.pop()).toBe("");
    expect(lines.length).toBe(4);
    // Before: lines of 524,288 letters, one call's piece after another's.
    expect(lines.map((line) => line.length)).toEqual([size, size, size, size]);
    expect(lines.map((line) => line[0]).sort()).toEqual(letters);
    for (const line of lines) expect(line).toBe(line[0]!.repeat(size));
  }, 60_000);
});
