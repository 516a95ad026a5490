/**
 * CI (`bash .ci/run`) runs the README's test command, `npm test`, as its steps rather than as
 * one command, so that the cluster suite can run beside the typecheck and lint. This keeps the
 * two from drifting apart: every step of package.json's `test` script is a command of
 * .ci/run, in the same order, and the README's second command is still `npm test`.
 */
import { readFileSync } from "node:fs";
import { describe, expect, it } from "vitest";

const root = new URL("../", import.meta.url);
const read = (path: string) => readFileSync(new URL(path, root), "utf8");

/** The command lines of a shell script, comments and blank lines left out. */
function commandLines(script: string): string[] {
  return script
    .split("\n")
    .map((line) => line.trim())
    .filter((line) => line.length > 0 && !line.startsWith("#"));
}

/** How a step of `npm test` is written in .ci/run: a package binary goes through npx. */
function asCiCommand(step: string): string {
  return step.startsWith("npm ") ? step : `npx ${step}`;
}

describe(".ci/run and npm test", () => {
  it("the README's test command is npm test", () => {
    const firstBlock = /```sh\n([\s\S]*?)```/.exec(read("README.md"))?.[1] ?? "";
    expect(firstBlock.split("\n")[1]).toMatch(/^npm test\s/);
  });

  it("runs every step of package.json's test script, in order", () => {
    const { scripts } = JSON.parse(read("package.json")) as { scripts: Record<string, string> };
    const steps = scripts.test!.split("&&").map((step) => step.trim());
    expect(steps.length).toBeGreaterThan(1);
    const lines = commandLines(read(".ci/run"));
    let from = 0;
    for (const step of steps) {
      const at = lines.findIndex((line, i) => i >= from && line === asCiCommand(step));
      expect(at, `.ci/run runs \`${asCiCommand(step)}\` after the steps before it`).toBeGreaterThanOrEqual(0);
      from = at + 1;
    }
  });
});
