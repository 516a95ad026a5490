/**
 * callModel makes model output storable (contracts.md §12): NUL and lone surrogates in the
 * text, tool calls and stop reason become U+FFFD, on whole and on interrupted steps alike.
 * The provider is a hand-written fake playing async generators (as in call-model-unit).
 */
import { describe, expect, it } from "vitest";
import { parseHistory } from "../src/shared/messages.js";
import { callModel, type RetryPolicy } from "../src/worker/call-model.js";
import {
  type ModelEvent,
  type ModelProvider,
  type ModelRequest,
  ProviderError,
} from "../src/worker/models/provider.js";

const R = "\uFFFD";
const POLICY: RetryPolicy = { maxAttempts: 2, baseDelayMs: 1, maxDelayMs: 1 };

function provider(events: ModelEvent[], thenError?: Error): ModelProvider & { calls: number } {
  const p = {
    calls: 0,
    async *stream(_request: ModelRequest): AsyncIterable<ModelEvent> {
      p.calls++;
      for (const event of events) yield event;
      if (thenError) throw thenError;
    },
  };
  return p;
}

const request = (): ModelRequest => ({
  sessionId: "s1",
  history: [{ role: "user", content: "hi" }],
  tools: [],
  signal: new AbortController().signal,
});

const step = (p: ModelProvider) => callModel(p, request(), { sleep: async () => {}, policy: POLICY });

describe("callModel sanitises what the model sent", () => {
  it('"bin\\u0000ary" is stored as "bin\\uFFFDary"', async () => {
    const p = provider([
      { type: "text", delta: "bin\u0000" },
      { type: "text", delta: "ary" },
      { type: "done", stopReason: "end_turn" },
    ]);
    expect(await step(p)).toEqual({
      ok: true,
      attempts: 1,
      // No usage reported: the budget's estimate (usage.ts) comes along.
      estimatedUsage: expect.any(Object),
      message: { role: "assistant", content: `bin${R}ary`, stopReason: "end_turn" },
    });
  });

  it("a stream cut inside a surrogate pair keeps the partial text with U+FFFD for the half", async () => {
    // "abc😀xyz" cut after "abc" and the high half of 😀.
    const p = provider([{ type: "text", delta: "abc\uD83D" }], new ProviderError("the stream broke", true));
    expect(await step(p)).toEqual({
      ok: true,
      attempts: 1,
      message: { role: "assistant", content: `abc${R}`, stopReason: "interrupted" },
      estimatedUsage: expect.any(Object),
    });
    expect(p.calls).toBe(1);
  });

  it("a stream that ends without done inside a pair is sanitised too", async () => {
    const p = provider([{ type: "text", delta: "\uDE00xyz" }]);
    expect(await step(p)).toMatchObject({
      ok: true,
      message: { content: `${R}xyz`, stopReason: "interrupted" },
    });
  });

  it("a valid pair split across two deltas is kept whole", async () => {
    const p = provider([
      { type: "text", delta: "abc\uD83D" },
      { type: "text", delta: "\uDE00xyz" },
      { type: "done", stopReason: "end_turn" },
    ]);
    expect(await step(p)).toMatchObject({ ok: true, message: { content: "abc😀xyz" } });
  });

  it("tool call ids, names, argument keys and values (nested) and the stop reason", async () => {
    const p = provider([
      {
        type: "tool_call",
        call: {
          id: "call\u0000",
          name: "write\uD800file",
          arguments: {
            "pa\u0000th": "a\uDC00",
            nested: { list: ["ok", "x\u0000", { deep: "\uD83D" }], n: 1 },
          },
        },
      },
      { type: "done", stopReason: "weird\u0000stop" },
    ]);
    expect(await step(p)).toEqual({
      ok: true,
      attempts: 1,
      // No usage reported: the budget's estimate (usage.ts) comes along.
      estimatedUsage: expect.any(Object),
      message: {
        role: "assistant",
        content: "",
        toolCalls: [
          {
            id: `call${R}`,
            name: `write${R}file`,
            arguments: { [`pa${R}th`]: `a${R}`, nested: { list: ["ok", `x${R}`, { deep: R }], n: 1 } },
          },
        ],
        stopReason: `weird${R}stop`,
      },
    });
  });

  it("ids that sanitising makes equal stay distinct; clean calls are passed as they are", async () => {
    const clean = { id: "c0", name: "list", arguments: { path: "😀" } };
    const p = provider([
      { type: "tool_call", call: clean },
      { type: "tool_call", call: { id: "c\u0000", name: "list", arguments: {} } },
      { type: "tool_call", call: { id: "c\uD800", name: "list", arguments: {} } },
      { type: "done", stopReason: "tool_use" },
    ]);
    const result = await step(p);
    expect(result.ok && result.message.toolCalls?.map((c) => c.id)).toEqual(["c0", `c${R}`, `c${R}_2`]);
    expect(result.ok && result.message.toolCalls?.[0]).toBe(clean);
  });

  it("a step that repeats a call id gets distinct ids, never one taken by another call", async () => {
    const p = provider([
      { type: "tool_call", call: { id: "x", name: "fail", arguments: { message: "m" } } },
      { type: "tool_call", call: { id: "x", name: "fail", arguments: { message: "m" } } },
      { type: "tool_call", call: { id: "x_1", name: "fail", arguments: { message: "m" } } },
      { type: "done", stopReason: "tool_use" },
    ]);
    const result = await step(p);
    expect(result.ok && result.message.toolCalls?.map((c) => c.id)).toEqual(["x", "x_2", "x_1"]);
  });

  it("an empty id (a server that sent none) gets one, so the step is a valid history and its result can answer it", async () => {
    // The Responses adapter falls back to the item id, and an Anthropic-compatible gateway's
    // tool_use block may carry "": stored as "", the step broke the message contract (ids are
    // non-empty): an export of the session could not be imported, and replayed as "" the call
    // went out with an id the APIs refuse.
    const p = provider([
      { type: "tool_call", call: { id: "", name: "list", arguments: {} } },
      { type: "tool_call", call: { id: "", name: "list", arguments: {} } },
      { type: "tool_call", call: { id: "call_0", name: "list", arguments: {} } },
      { type: "done", stopReason: "tool_use" },
    ]);
    const result = await step(p);
    if (!result.ok) throw new Error(result.error);
    const ids = result.message.toolCalls?.map((c) => c.id) ?? [];
    expect(ids.every((id) => id !== "")).toBe(true);
    expect(new Set(ids).size).toBe(3);
    expect(() => parseHistory([{ role: "user", content: "hi" }, result.message])).not.toThrow();
  });

  it("an id too long to store gets a digest of it; two such ids stay distinct, one of 256 stays", async () => {
    const long = (c: string) => c.repeat(9_000);
    const edge = "e".repeat(256);
    const p = provider([
      { type: "tool_call", call: { id: long("a"), name: "list", arguments: {} } },
      { type: "tool_call", call: { id: long("b"), name: "list", arguments: {} } },
      { type: "tool_call", call: { id: edge, name: "list", arguments: {} } },
      { type: "done", stopReason: "tool_use" },
    ]);
    const result = await step(p);
    const ids = result.ok ? result.message.toolCalls!.map((c) => c.id) : [];
    expect(ids[0]).toMatch(/^call_[0-9a-f]{32}$/);
    expect(ids[1]).toMatch(/^call_[0-9a-f]{32}$/);
    expect(ids[0]).not.toBe(ids[1]);
    expect(ids[2]).toBe(edge);
    // The same id gets the same digest on another call.
    const again = await step(
      provider([
        { type: "tool_call", call: { id: long("a"), name: "list", arguments: {} } },
        { type: "done", stopReason: "tool_use" },
      ]),
    );
    expect(again.ok && again.message.toolCalls![0]!.id).toBe(ids[0]);
  });

  it("the error text of a failed step is sanitised", async () => {
    const p = provider([], new ProviderError("bad request: \u0000\uD800", false));
    expect(await step(p)).toEqual({
      ok: false,
      aborted: false,
      error: `bad request: ${R}${R}`,
      attempts: 1,
      rejected: true,
    });
  });
});
