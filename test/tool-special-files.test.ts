/**
 * The built-in file tools on a name in the tool directory that is no regular file: a FIFO
 * (named pipe) with no reader made `open(…, O_WRONLY)` block in a libuv thread for ever. The
 * call's time limit answered it, but the thread stayed blocked: four such calls took the whole
 * thread pool, and every file tool (and transcript write) of the worker hung after them.
 */
import { execFileSync } from "node:child_process";
import { symlink } from "node:fs/promises";
import { join } from "node:path";
import { beforeAll, describe, expect, it } from "vitest";
import { useBuiltinTools } from "./support/builtin-tools.js";

const fixture = useBuiltinTools("fleet-special-", "sub");

beforeAll(async () => {
  const { toolDir } = fixture;
  execFileSync("mkfifo", [join(toolDir, "pipe"), join(toolDir, "sub", "pipe")]);
  await symlink(join(toolDir, "pipe"), join(toolDir, "pipe-link"));
});

/** The call's outcome, or "hung" when it takes more than 2 s (no time limit is set here). */
async function call(name: string, args: Record<string, unknown>) {
  const outcome = fixture.call(name, args);
  const hung = new Promise<"hung">((resolve) => setTimeout(() => resolve("hung"), 2_000).unref());
  return Promise.race([outcome, hung]);
}

describe("built-in file tools on a FIFO", () => {
  for (const path of ["pipe", "sub/pipe", "pipe-link"])
    for (const [tool, args] of [
      ["write_file", { content: "x" }],
      ["append_file", { line: "x" }],
    ] as const)
      it(`${tool} "${path}" is refused at once, not left waiting for a reader`, async () => {
        const outcome = await call(tool, { path, ...args });
        expect(outcome).toEqual({
          success: false,
          content: `Refused: "${path}" is not a regular file.`,
        });
      });

  it("leave the worker's file tools working afterwards", async () => {
    expect(await call("write_file", { path: "after.txt", content: "ok" })).toEqual({
      success: true,
      content: "wrote after.txt",
    });
  });
});
