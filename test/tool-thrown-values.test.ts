/**
 * What a user tool (`fleet worker --tools`, plain JavaScript) or an extension hook throws or
 * returns when it is no Error and no string: `executeTool` never throws (execute-tool.ts), so
 * each gets a failed (or successful) result that says what it can. A value with no string
 * form threw out of executeTool: the run crashed, and the resume recorded the call as
 * "the process stopped while this tool was running" though the tool had finished.
 */
import { describe, expect, it } from "vitest";
import { Extensions } from "../src/worker/hook-runner.js";
import { executeTool, resultText } from "../src/worker/tools/execute-tool.js";
import type { Tool } from "../src/worker/tools/registry.js";

const base: Tool = {
  name: "t",
  description: "",
  parameters: { type: "object", properties: {} },
  run: async () => "",
};
const context = () => ({ callId: "c", callKey: "k", sessionId: "s", signal: new AbortController().signal });
const outcome = (run: () => unknown) => executeTool({ ...base, run: run as never }, "t", {}, context());

describe("a tool that throws something other than an Error", () => {
  it("is answered as failed, with the best text the value has, and executeTool never throws", async () => {
    expect(await outcome(() => Promise.reject("boom"))).toEqual({ success: false, content: "boom" });
    expect(await outcome(() => Promise.reject({ message: "disk quota exceeded", code: 7 }))).toEqual({
      success: false,
      content: "disk quota exceeded",
    });
    const bare = Object.create(null);
    expect(await outcome(() => Promise.reject(bare))).toEqual({ success: false, content: "{}" });
    const circular = Object.create(null);
    circular.self = circular;
    const answer = await outcome(() => Promise.reject(circular));
    expect(answer.success).toBe(false);
    expect(answer.content).toMatch(/cannot be shown as text/);
    const odd = new Error("x");
    (odd as unknown as { message: unknown }).message = { detail: 1 };
    expect(await outcome(() => Promise.reject(odd))).toEqual({
      success: false,
      content: "Error: [object Object]",
    });
    const trap = new Error("x");
    Object.defineProperty(trap, "message", {
      get() {
        throw new Error("trap");
      },
    });
    expect((await outcome(() => Promise.reject(trap))).success).toBe(false);
  });

  it("has a result with no string form stored as a note, not a crash", async () => {
    const circular = Object.create(null);
    circular.self = circular;
    expect(resultText(circular)).toMatch(/cannot be shown as text/);
    expect(await outcome(async () => circular)).toEqual({ success: true, content: resultText(circular) });
  });
});

describe("a tool that returns an object that is no JSON", () => {
  it("is answered with a note saying why, never [object Object]", async () => {
    const circular: Record<string, unknown> = { id: 7 };
    circular.self = circular;
    const toJsonThrows = {
      toJSON() {
        throw new Error("not now");
      },
    };
    // Before: each was stored as "[object Object]", a success the model could read nothing in.
    expect(await outcome(async () => circular)).toEqual({
      success: true,
      content: "(the tool's result cannot be shown as text: Converting circular structure to JSON)",
    });
    expect(await outcome(async () => ({ count: 10n }))).toEqual({
      success: true,
      content: "(the tool's result cannot be shown as text: Do not know how to serialize a BigInt)",
    });
    expect(await outcome(async () => toJsonThrows)).toEqual({
      success: true,
      content: "(the tool's result cannot be shown as text: not now)",
    });
    // A value with a string form of its own keeps it; a BigInt alone is its digits.
    expect(await outcome(async () => 10n)).toEqual({ success: true, content: "10" });
  });
});

describe("a beforeRun hook that throws a value with no string form", () => {
  it("ends the run failed with a message, instead of throwing out of the hook runner", async () => {
    const metrics = { hookFailures: { inc() {} } } as never;
    const log = { warn() {} };
    const circular = Object.create(null);
    circular.self = circular;
    const extensions = new Extensions(
      [{ name: "odd", beforeRun: () => Promise.reject(circular) }],
      metrics,
      log,
    );
    const message = await extensions.beforeRun({} as never);
    expect(message).toMatch(/^beforeRun hook of extension "odd" failed: .*cannot be shown as text/);
    const plain = new Extensions(
      [{ name: "p", beforeRun: () => Promise.reject({ message: "no" }) }],
      metrics,
      log,
    );
    expect(await plain.beforeRun({} as never)).toBe('beforeRun hook of extension "p" failed: no');
  });
});

describe("a tool whose argument schema throws (a transform or refine with a bug)", () => {
  it("is answered as failed with what it threw, never run, and executeTool does not throw", async () => {
    let ran = false;
    const schema = {
      safeParse: () => {
        throw new TypeError("Cannot read properties of undefined (reading 'trim')");
      },
    };
    const run = async () => {
      ran = true;
      return "";
    };
    const tool = { ...base, schema, run } as unknown as Tool;
    // Before: the TypeError escaped executeTool, the job failed and the run crashed; its resume
    // answered the call "the process stopped while this tool was running" though nothing ran.
    expect(await executeTool(tool, "t", { key: undefined }, context())).toEqual({
      success: false,
      content: "Invalid arguments: Cannot read properties of undefined (reading 'trim')",
    });
    expect(ran).toBe(false);
  });
});

describe("a tool that returns a proxy whose prototype cannot be read", () => {
  it("is answered with what its JSON says; executeTool never throws", async () => {
    // Asked whether it is bytes (result-text.ts), its `getPrototypeOf` threw out of executeTool.
    const odd = new Proxy(
      { found: 3 },
      {
        getPrototypeOf() {
          throw new Error("no prototype here");
        },
      },
    );
    expect(await outcome(async () => odd)).toEqual({ success: true, content: '{"found":3}' });
  });
});
