/**
 * The built-in file tools' failures name the tool's own path, never the worker's absolute
 * one: a file system's message (`EISDIR: illegal operation on a directory, open
 * '/srv/fleet-files/d'`) told the model, and whoever reads the session, where the worker keeps
 * its files. The code stays, with a few words on what it means.
 */
import { readFile, rm } from "node:fs/promises";
import { join } from "node:path";
import { describe, expect, it } from "vitest";
import { builtinTools } from "../src/worker/tools/builtin.js";
import { executeTool } from "../src/worker/tools/execute-tool.js";
import { ToolRegistry } from "../src/worker/tools/registry.js";
import { toolContext, useBuiltinTools } from "./support/builtin-tools.js";

const fixture = useBuiltinTools("fleet-error-paths-", "folder/inner");
const { call } = fixture;

describe("built-in file tools' errors", () => {
  it("a folder written to: EISDIR with the tool's path, not the tool directory's", async () => {
    for (const [tool, args, what] of [
      ["write_file", { path: "folder", content: "x" }, "write"],
      ["append_file", { path: "folder/inner", line: "x" }, "append to"],
    ] as const) {
      const outcome = await call(tool, args);
      expect(outcome.success).toBe(false);
      expect(outcome.content).toBe(`EISDIR: cannot ${what} "${args.path}": it is a folder.`);
      expect(outcome.content).not.toContain(fixture.base);
    }
  });

  it("a path through a file: ENOTDIR with the tool's path", async () => {
    expect(await call("write_file", { path: "plain.txt", content: "x" })).toMatchObject({ success: true });
    const outcome = await call("append_file", { path: "plain.txt/under", line: "x" });
    expect(outcome.success).toBe(false);
    expect(String(outcome.content)).not.toContain(fixture.base);
    expect(outcome.content).toMatch(
      /^ENOTDIR: cannot append to "plain\.txt\/under": a part of it is not a folder\.$/,
    );
  });

  it("a NUL in the path: refused with the tool's path, not Node's message naming the tool directory", async () => {
    for (const [tool, args] of [
      ["write_file", { path: "a\0b", content: "x" }],
      ["append_file", { path: "folder/a\0b", line: "x" }],
    ] as const) {
      const outcome = await call(tool, args);
      expect(outcome.success).toBe(false);
      expect(outcome.content).not.toContain(fixture.base);
      expect(outcome.content).toBe(
        `Refused: "${args.path}" contains a NUL character, which no file name may.`,
      );
    }
  });

  it("refusals and a write that works read as before", async () => {
    expect(await call("write_file", { path: "../out.txt", content: "x" })).toMatchObject({ success: false });
    expect(String((await call("write_file", { path: "../out.txt", content: "x" })).content)).not.toContain(
      fixture.base,
    );
    expect(await call("write_file", { path: "folder/ok.txt", content: "x" })).toEqual({
      success: true,
      content: "wrote folder/ok.txt",
    });
  });
  it("the tool directory removed while the worker runs (a /tmp cleaner): made again, not 'leads outside'", async () => {
    const gone = join(fixture.base, "gone");
    const tools = new ToolRegistry().register(...builtinTools(gone));
    const callIn = (name: string, args: Record<string, unknown>) =>
      executeTool(tools.get(name), name, args, toolContext());
    expect(await callIn("write_file", { path: "first.txt", content: "x" })).toMatchObject({ success: true });
    await rm(gone, { recursive: true });
    expect(await callIn("write_file", { path: "a.txt", content: "x" })).toEqual({
      success: true,
      content: "wrote a.txt",
    });
    await rm(gone, { recursive: true });
    expect(await callIn("append_file", { path: "sub/b.txt", line: "y" })).toEqual({
      success: true,
      content: "appended to sub/b.txt",
    });
    expect(await readFile(join(gone, "sub", "b.txt"), "utf8")).toBe("y\n");
  });
});
