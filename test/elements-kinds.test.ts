/**
 * The arrays the worker's hot path builds for the next function (the items of a turn's batch,
 * the writes of a grouped statement, a scripted step's tool calls) have one elements kind,
 * packed, whether the function that builds them runs interpreted or optimized. Built with
 * `.map` they were packed from V8's builtin and holey from the `map` TurboFan inlines, and
 * every function optimized for one kind was thrown away at the first array of the other and
 * compiled again: in a 1,500-session bench, the event writer's `writeEntries`, the agent loop's
 * `append` and the scripted model's `stream`, each once or twice per worker (docs/performance.md).
 */
import { execFileSync } from "node:child_process";
import { resolve } from "node:path";
import { describe, expect, it } from "vitest";

describe("elements kinds on the worker's hot path", () => {
  it("hands on packed arrays before and after V8 optimizes the function that builds them", () => {
    const out = execFileSync(
      process.execPath,
      [
        "--allow-natives-syntax",
        "--import",
        "tsx",
        resolve(import.meta.dirname, "fixtures/elements-kinds.mjs"),
      ],
      { cwd: resolve(import.meta.dirname, ".."), encoding: "utf8" },
    );
    const { optimized, holey } = JSON.parse(out.trim().split("\n").at(-1)!) as {
      optimized: Record<string, boolean>;
      holey: Record<string, boolean[]>;
    };
    expect(holey).toEqual({ turnBatch: [false], groupCommit: [false], scriptedToolCalls: [false] });
    // The optimized code ran and was kept (a holey array would have deoptimized it).
    expect(optimized.turnBatch).toBe(true);
    expect(optimized.scriptedToolCalls).toBe(true);
  }, 30_000);
});
