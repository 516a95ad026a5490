/**
 * `onCommitted` hands each extension a frozen copy of every message its run commits
 * (hook-views.ts: a structured clone, walked whole, then frozen). With extensions loaded but
 * none of them having an `onCommitted` hook (a transcript off, an extension with `beforeRun`
 * only), the worker still copied every committed message — a tool result up to 1 MB, an
 * assistant step with its calls — for no one. Now nothing is copied when no one listens.
 */
import { describe, expect, it } from "vitest";
import type { RunContext } from "../src/worker/extensions.js";
import { Extensions } from "../src/worker/hook-runner.js";

const metrics = { hookFailures: { inc() {} } } as never;
const log = { warn() {} };
const ctx = { sessionId: "s", runId: "r", signal: new AbortController().signal } as unknown as RunContext;

/** A committed message whose content counts how often it is read (a copy reads it). */
function counted(): { committed: Parameters<Extensions["onCommitted"]>[1]; reads: () => number } {
  let reads = 0;
  const message = { role: "assistant", seq: 1 } as Record<string, unknown>;
  Object.defineProperty(message, "content", {
    enumerable: true,
    get: () => {
      reads++;
      return "a long answer";
    },
  });
  return { committed: { runId: "r", seq: 1, message } as never, reads: () => reads };
}

describe("onCommitted", () => {
  it("copies no message when no extension has the hook", async () => {
    const extensions = new Extensions([{ name: "gate", beforeRun() {} }], metrics, log, 1_000);
    const { committed, reads } = counted();
    await extensions.onCommitted(ctx, committed);
    expect(reads()).toBe(0);
  });

  it("hands an extension that has it its copy, as before", async () => {
    const seen: unknown[] = [];
    const extensions = new Extensions(
      [
        { name: "gate", beforeRun() {} },
        { name: "audit", onCommitted: (_ctx, c) => void seen.push(c) },
      ],
      metrics,
      log,
      1_000,
    );
    const { committed, reads } = counted();
    await extensions.onCommitted(ctx, committed);
    expect(reads()).toBe(1);
    expect(seen).toEqual([
      { runId: "r", seq: 1, message: { role: "assistant", seq: 1, content: "a long answer" } },
    ]);
    expect(Object.isFrozen((seen[0] as { message: object }).message)).toBe(true);
  });
});
