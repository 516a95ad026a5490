/**
 * The decisions of tool time limits (tools/time-limit.ts) and `executeTool` past a limit,
 * without a worker (test/tool-timeout.test.ts runs them on one).
 */
import { getEventListeners } from "node:events";
import { describe, expect, it, vi } from "vitest";
import { parseAgentConfig } from "../src/shared/agent-config.js";
import { loadConfig } from "../src/shared/config.js";
import { executeTool } from "../src/worker/tools/execute-tool.js";
import { type Tool, ToolRegistry } from "../src/worker/tools/registry.js";
import {
  DEFAULT_TOOL_TIMEOUT_MS,
  isTimeLimit,
  MAX_TIMER_MS,
  toolTimedOutText,
  toolTimeLimit,
} from "../src/worker/tools/time-limit.js";

const base: Tool = {
  name: "t",
  description: "",
  parameters: { type: "object", properties: {} },
  run: async () => "ok",
};
const context = () => ({ callId: "c", callKey: "k", sessionId: "s", signal: new AbortController().signal });

describe("toolTimeLimit", () => {
  it("takes the tool's own limit over the fleet's, 0 meaning none", () => {
    expect(toolTimeLimit(600_000, undefined, undefined)).toBe(600_000);
    expect(toolTimeLimit(600_000, 5_000, undefined)).toBe(5_000);
    expect(toolTimeLimit(600_000, 3_600_000, undefined)).toBe(3_600_000);
    expect(toolTimeLimit(600_000, 0, undefined)).toBeNull();
    expect(toolTimeLimit(0, undefined, undefined)).toBeNull();
    expect(toolTimeLimit(0, 5_000, undefined)).toBe(5_000);
  });

  it("lets an agent shorten the operator's limit, never lengthen it", () => {
    expect(toolTimeLimit(600_000, undefined, 1_000)).toBe(1_000);
    expect(toolTimeLimit(600_000, undefined, 900_000)).toBe(600_000);
    expect(toolTimeLimit(600_000, 5_000, 60_000)).toBe(5_000);
    expect(toolTimeLimit(0, undefined, 1_000)).toBe(1_000);
    expect(toolTimeLimit(600_000, 0, 1_000)).toBe(1_000);
  });

  it("says how long the tool had, not that it was interrupted", () => {
    expect(toolTimedOutText(300)).toBe(
      "the tool did not finish within 300 ms (its time limit): it was asked to stop, and whatever it changes may or may not have happened",
    );
  });

  it("accepts whole ms from 0 to the longest Node timer, in tools, the environment and agents", () => {
    for (const ok of [0, 1, 600_000, MAX_TIMER_MS]) expect(isTimeLimit(ok)).toBe(true);
    for (const bad of [-1, 1.5, MAX_TIMER_MS + 1, Number.NaN, "5", null])
      expect(isTimeLimit(bad)).toBe(false);
    expect(() => new ToolRegistry().register({ ...base, timeoutMs: -1 })).toThrow(
      /tool\.timeoutMs.*tool "t": must be a whole number of ms from 0 \(no limit\) to 2147483647/,
    );
    expect(() => new ToolRegistry().register({ ...base, timeoutMs: 0 })).not.toThrow();
    expect(loadConfig({}).toolTimeoutMs).toBe(DEFAULT_TOOL_TIMEOUT_MS);
    expect(loadConfig({ FLEET_TOOL_TIMEOUT_MS: "0" }).toolTimeoutMs).toBe(0);
    expect(() => loadConfig({ FLEET_TOOL_TIMEOUT_MS: "3000000000" })).toThrow(/FLEET_TOOL_TIMEOUT_MS/);
    const model = { provider: "scripted", steps: [{ text: "hi" }] };
    expect(parseAgentConfig({ model, toolTimeoutMs: 1_000 }).toolTimeoutMs).toBe(1_000);
    expect(() => parseAgentConfig({ model, toolTimeoutMs: 0 })).toThrow(/agent\.toolTimeoutMs/);
  });
});

describe("executeTool with a time limit", () => {
  it("aborts the call's signal and answers it as timed out; a result that comes later is only reported", async () => {
    let release!: (value: string) => void;
    let signal: AbortSignal | undefined;
    const deaf: Tool = {
      ...base,
      run: (_args, ctx) => {
        signal = ctx.signal;
        return new Promise<string>((resolve) => {
          release = resolve;
        });
      },
    };
    const late: { success: boolean; lateByMs: number }[] = [];
    const outcome = await executeTool(deaf, "t", {}, context(), {
      timeoutMs: 20,
      abandonAfterMs: 10,
      onLate: (l) => late.push(l),
    });
    expect(outcome).toEqual({
      success: false,
      content: toolTimedOutText(20),
      timedOut: { stoppedInGrace: false },
    });
    expect(signal?.aborted).toBe(true);
    expect(String(signal?.reason)).toContain("did not finish within 20 ms");
    expect(late).toEqual([]);
    release("too late");
    await new Promise((resolve) => setImmediate(resolve));
    expect(late).toEqual([{ success: true, lateByMs: expect.any(Number) }]);
  });

  it("waits for a tool that stops when asked, and still answers as timed out", async () => {
    const polite: Tool = {
      ...base,
      run: (_args, { signal }) =>
        new Promise<string>((_resolve, reject) =>
          signal.addEventListener("abort", () => reject(new Error("stopped"))),
        ),
    };
    const late: unknown[] = [];
    const outcome = await executeTool(polite, "t", {}, context(), {
      timeoutMs: 20,
      abandonAfterMs: 60_000,
      onLate: (l) => late.push(l),
    });
    expect(outcome).toEqual({
      success: false,
      content: toolTimedOutText(20),
      timedOut: { stoppedInGrace: true },
    });
    expect(late).toEqual([]);
  });

  it("leaves a call under its limit (or without one) alone", async () => {
    let signal: AbortSignal | undefined;
    const quick: Tool = {
      ...base,
      run: async (_args, ctx) => {
        signal = ctx.signal;
        return "done";
      },
    };
    expect(await executeTool(quick, "t", {}, context(), { timeoutMs: 60_000 })).toEqual({
      success: true,
      content: "done",
    });
    expect(signal?.aborted).toBe(false);
    expect(await executeTool(quick, "t", {}, context(), { timeoutMs: null })).toEqual({
      success: true,
      content: "done",
    });
  });

  it("passes its run's abort on to the call's signal", async () => {
    const run = new AbortController();
    let started!: () => void;
    const running = new Promise<void>((resolve) => {
      started = resolve;
    });
    const polite: Tool = {
      ...base,
      run: (_args, { signal }) =>
        new Promise<string>((_resolve, reject) => {
          signal.addEventListener("abort", () => reject(new Error("stopped")));
          started();
        }),
    };
    const pending = executeTool(
      polite,
      "t",
      {},
      { ...context(), signal: run.signal },
      {
        timeoutMs: 60_000,
      },
    );
    await running;
    run.abort();
    expect(await pending).toEqual({ success: false, content: "stopped" });
  });

  it("waits with one listener on its run's signal and one timer (its limit), and leaves neither behind", async () => {
    const run = new AbortController();
    let listeners = -1;
    const looking: Tool = {
      ...base,
      run: async () => {
        listeners = getEventListeners(run.signal, "abort").length;
        return "done";
      },
    };
    const timers = vi.spyOn(globalThis, "setTimeout");
    try {
      expect(
        await executeTool(looking, "t", {}, { ...context(), signal: run.signal }, { timeoutMs: 60_000 }),
      ).toEqual({ success: true, content: "done" });
      expect(timers.mock.calls.length).toBe(1);
      timers.mockClear();
      expect(
        await executeTool(looking, "t", {}, { ...context(), signal: run.signal }, { timeoutMs: null }),
      ).toEqual({ success: true, content: "done" });
      expect(timers.mock.calls.length).toBe(0);
    } finally {
      timers.mockRestore();
    }
    expect(listeners).toBe(1);
    expect(getEventListeners(run.signal, "abort")).toHaveLength(0);
  });

  it("answers a tool deaf to its run's abort as abandoned after the grace, once", async () => {
    const run = new AbortController();
    let started!: () => void;
    const running = new Promise<void>((resolve) => {
      started = resolve;
    });
    const deaf: Tool = {
      ...base,
      run: () => {
        started();
        return new Promise<string>(() => {});
      },
    };
    const abandoned: Promise<void>[] = [];
    const pending = executeTool(
      deaf,
      "t",
      {},
      { ...context(), signal: run.signal },
      { timeoutMs: 60_000, abandonAfterMs: 30, onAbandoned: (settles) => abandoned.push(settles) },
    );
    // Aborted once the tool runs (aborted before, the call runs no tool: not started).
    await running;
    run.abort();
    expect(await pending).toEqual({
      success: false,
      content:
        "the tool did not stop within 30 ms of being asked to; it may still be running, and whatever it changes may or may not happen",
    });
    expect(abandoned).toHaveLength(1);
    expect(getEventListeners(run.signal, "abort")).toHaveLength(0);
  });
});
