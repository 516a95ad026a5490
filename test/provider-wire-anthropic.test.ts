/**
 * The Anthropic adapter against what the Messages API sends and refuses (contracts §13,
 * resume-semantics §6), through the real SDK and fake-anthropic.ts, which speaks the wire
 * protocol and refuses what the API refuses: a tool turn without its thinking block while
 * thinking is on, a thinking block without its signature, a tool id outside
 * `^[a-zA-Z0-9_-]+$`. Then the wire details the adapter reads as the SDK's types document them
 * (these matched). The OpenAI side: provider-wire-openai.test.ts.
 */
import { afterAll, beforeAll, beforeEach, describe, expect, it } from "vitest";
import type { Message } from "../src/shared/messages.js";
import { resumePoint } from "../src/shared/resume-point.js";
import { AnthropicModel } from "../src/worker/models/anthropic.js";
import { type FakeAnthropic, startFakeAnthropic } from "./support/fake-anthropic.js";
import { claudeAt, foreignToolTurn, step } from "./support/model-steps.js";

let anthropic: FakeAnthropic;
beforeAll(async () => {
  anthropic = await startFakeAnthropic();
});
afterAll(async () => {
  await anthropic?.close();
});
beforeEach(() => {
  anthropic.requests.length = 0;
});

const claude = (extra: Record<string, unknown> = {}) => claudeAt(anthropic.url, extra);

describe("anthropic thinking: a tool turn that has no thinking block of its own", () => {
  /** An OpenAI chat tool turn: the primary before a fallback to Claude with thinking. */
  const fromOpenAI: Message[] = [
    { role: "user", content: "write a" },
    {
      role: "assistant",
      content: "",
      toolCalls: [{ id: "call_1", name: "write_file", arguments: { path: "a" } }],
      stopReason: "tool_use",
      usage: { inputTokens: 5, outputTokens: 5 },
    },
    { role: "tool", toolCallId: "call_1", name: "write_file", content: "ok", success: true },
  ];

  it("a fallback to Claude with thinking mid tool turn is sent without thinking; the next user turn has it", async () => {
    for (const thinking of [{ type: "enabled", budgetTokens: 2048 }, { type: "adaptive" }]) {
      anthropic.requests.length = 0;
      anthropic.script({ blocks: [{ type: "text", text: "Wrote a." }] });
      const model = claude({ thinking });
      const answer = await step(model, fromOpenAI);
      expect(answer).toMatchObject({ content: "Wrote a.", stopReason: "end_turn" });
      expect(anthropic.requests[0]!.body).not.toHaveProperty("thinking");
    }
    // The turn is over: a new user message gets thinking again.
    anthropic.requests.length = 0;
    const history: Message[] = [
      ...fromOpenAI,
      { role: "assistant", content: "Wrote a.", stopReason: "end_turn" },
      { role: "user", content: "now b" },
    ];
    anthropic.script({
      blocks: [
        { type: "thinking", thinking: "b next" },
        { type: "text", text: "Sure." },
      ],
    });
    await step(claude(), history);
    expect(anthropic.requests.at(-1)!.body.thinking).toEqual({ type: "enabled", budget_tokens: 2048 });
  });
});

describe("anthropic thinking: a thinking block that never got its signature", () => {
  it("is not kept: the tool turn goes back without it (and without thinking), not refused for its empty signature", async () => {
    anthropic.script(
      {
        blocks: [
          { type: "thinking", thinking: "unsigned thought", signature: null },
          { type: "tool_use", id: "toolu_u", name: "write_file", input: { path: "a" } },
        ],
        stopReason: "tool_use",
      },
      { blocks: [{ type: "text", text: "Done." }] },
    );
    const model = claude();
    const history: Message[] = [{ role: "user", content: "write a" }];
    const first = await step(model, history);
    expect(first).toMatchObject({ stopReason: "tool_use", toolCalls: [{ id: "toolu_u" }] });
    expect(JSON.stringify(first.providerState ?? null)).not.toContain("unsigned thought");
    history.push(first, {
      role: "tool",
      toolCallId: "toolu_u",
      name: "write_file",
      content: "ok",
      success: true,
    });
    const second = await step(model, history);
    expect(second).toMatchObject({ content: "Done.", stopReason: "end_turn" });
    const body = anthropic.requests[1]!.body;
    expect(body).not.toHaveProperty("thinking");
    expect(body.messages[1]!.content).toEqual([
      { type: "tool_use", id: "toolu_u", name: "write_file", input: { path: "a" } },
    ]);
  });

  it("a signed block next to it is kept, and the turn keeps thinking", async () => {
    anthropic.script(
      {
        blocks: [
          { type: "thinking", thinking: "signed thought" },
          { type: "thinking", thinking: "unsigned thought", signature: null },
          { type: "tool_use", id: "toolu_s", name: "write_file", input: {} },
        ],
        stopReason: "tool_use",
      },
      { blocks: [{ type: "text", text: "Done." }] },
    );
    const model = claude();
    const history: Message[] = [{ role: "user", content: "write a" }];
    const first = await step(model, history);
    history.push(first, {
      role: "tool",
      toolCallId: "toolu_s",
      name: "write_file",
      content: "ok",
      success: true,
    });
    await step(model, history);
    const body = anthropic.requests[1]!.body;
    expect(body.thinking).toEqual({ type: "enabled", budget_tokens: 2048 });
    expect((body.messages[1]!.content as { type: string }[]).map((b) => b.type)).toEqual([
      "thinking",
      "tool_use",
    ]);
  });
});

describe("anthropic: what the Messages API sends, read as documented (these matched)", () => {
  it("cache usage: input counts uncached + cache writes + cache reads once, though message_delta repeats them", async () => {
    anthropic.script({
      blocks: [{ type: "text", text: "hi" }],
      usage: {
        input_tokens: 10,
        output_tokens: 50,
        cache_creation_input_tokens: 100,
        cache_read_input_tokens: 1000,
      },
    });
    const price = { input: 3, output: 15, cacheRead: 0.3, cacheWrite: 3.75 };
    const model = new AnthropicModel(
      { provider: "anthropic", model: "claude-test", baseUrl: anthropic.url },
      { keyless: true },
    );
    model.identity.price = price;
    const message = await step(model, [{ role: "user", content: "hi" }]);
    expect(message.usage).toEqual({
      inputTokens: 1110,
      outputTokens: 50,
      cacheReadTokens: 1000,
      cacheWriteTokens: 100,
      costUsd: (10 * 3 + 1000 * 0.3 + 100 * 3.75 + 50 * 15) / 1e6,
    });
    // Breakpoints: system, last tool, last user turn — at most 4, none on a thinking block.
    const body = anthropic.requests[0]!.body;
    expect(JSON.stringify(body).match(/"cache_control"/g)).toHaveLength(3);
  });

  it("tool_use input streamed as input_json_delta: fragments joined; an empty input ('' deltas) is {}", async () => {
    anthropic.script({
      blocks: [
        { type: "tool_use", id: "toolu_a", name: "write_file", input: {}, jsonChunks: [""] },
        {
          type: "tool_use",
          id: "toolu_b",
          name: "write_file",
          input: {},
          jsonChunks: ['{"pa', 'th": "b', '.txt"}'],
        },
      ],
      stopReason: "tool_use",
    });
    const message = await step(claude({ thinking: undefined }), [{ role: "user", content: "go" }]);
    expect(message).toMatchObject({
      stopReason: "tool_use",
      toolCalls: [
        { id: "toolu_a", name: "write_file", arguments: {} },
        { id: "toolu_b", name: "write_file", arguments: { path: "b.txt" } },
      ],
    });
  });

  it("interleaved thinking across two tool turns: every turn's thinking goes back verbatim, in order", async () => {
    anthropic.script(
      {
        blocks: [
          { type: "thinking", thinking: "first a" },
          { type: "tool_use", id: "toolu_1", name: "write_file", input: { path: "a" } },
        ],
        stopReason: "tool_use",
      },
      {
        blocks: [
          { type: "thinking", thinking: "a worked, now b" },
          { type: "text", text: "Now b." },
          { type: "tool_use", id: "toolu_2", name: "write_file", input: { path: "b" } },
        ],
        stopReason: "tool_use",
      },
      { blocks: [{ type: "text", text: "Both written." }] },
    );
    const model = claude({ thinking: { type: "adaptive" } });
    const history: Message[] = [{ role: "user", content: "write a then b" }];
    for (const id of ["toolu_1", "toolu_2"]) {
      history.push(await step(model, history));
      history.push({ role: "tool", toolCallId: id, name: "write_file", content: "ok", success: true });
    }
    expect(await step(model, history)).toMatchObject({ content: "Both written.", stopReason: "end_turn" });
    const sent = anthropic.requests[2]!.body;
    expect(sent.thinking).toEqual({ type: "adaptive" });
    expect(sent.messages.map((m) => (m.content as { type: string }[]).map((b) => b.type))).toEqual([
      ["text"],
      ["thinking", "tool_use"],
      ["tool_result"],
      ["thinking", "text", "tool_use"],
      ["tool_result"],
    ]);
  });

  it("an overloaded_error event after output: interrupted with the text kept, and resumable as retry_response", async () => {
    anthropic.script({
      blocks: [{ type: "text", text: "Partial answer", chunks: ["Partial ", "answer"] }],
      errorAfterEvents: 4,
      errorEvent: { type: "overloaded_error", message: "Overloaded" },
    });
    const history: Message[] = [{ role: "user", content: "go" }];
    const message = await step(claude({ thinking: undefined }), history);
    expect(message).toMatchObject({ content: "Partial answer", stopReason: "interrupted" });
    expect(resumePoint([...history, message])).toMatchObject({ resumable: true, kind: "retry_response" });
  });
});

describe("tool call ids another provider minted go out as Anthropic accepts them", () => {
  it("to Anthropic: an id outside ^[a-zA-Z0-9_-]+$ is rewritten, the same for the call and its result", async () => {
    anthropic.script({ blocks: [{ type: "text", text: "Done." }] });
    const history = foreignToolTurn("functions.write_file:0");
    expect(await step(claude({ thinking: undefined }), history)).toMatchObject({ content: "Done." });
    const [, call, result] = anthropic.requests[0]!.body.messages as { content: Record<string, unknown>[] }[];
    const id = call!.content[0]!.id as string;
    expect(id).toMatch(/^[a-zA-Z0-9_-]+$/);
    expect(id).toMatch(/^functions_write_file_0_[0-9a-f]{16}$/);
    expect(result!.content[0]).toMatchObject({ type: "tool_result", tool_use_id: id });
    // The history keeps its own ids.
    expect(history[2]).toMatchObject({ toolCallId: "functions.write_file:0" });
  });

  it("an id another provider used in two steps (Kimi's functions.NAME:0, per turn) goes out distinct, each result with its call", async () => {
    // An OpenAI-compatible server that numbers calls per turn repeats ids across steps; the
    // Messages API refuses a request whose tool_use ids repeat ("tool_use ids must be
    // unique"), so a fallback to Claude was refused at every attempt and the session parked.
    anthropic.script({ blocks: [{ type: "text", text: "Done." }] });
    const history: Message[] = [
      ...foreignToolTurn("functions.write_file:0"),
      ...foreignToolTurn("functions.write_file:0").slice(1),
      ...foreignToolTurn("call_0").slice(1),
      ...foreignToolTurn("call_0").slice(1),
    ];
    expect(await step(claude({ thinking: undefined }), history)).toMatchObject({ content: "Done." });
    const turns = anthropic.requests[0]!.body.messages as { content: Record<string, unknown>[] }[];
    const calls = turns.filter((_, i) => i % 2 === 1).map((turn) => turn.content[0]!.id as string);
    const results = turns.filter((_, i) => i % 2 === 0 && i > 0).map((turn) => turn.content[0]!.tool_use_id);
    expect(new Set(calls).size).toBe(4);
    expect(results).toEqual(calls);
    // The first of each goes out as before; the same history gives the same request.
    expect(calls[0]).toMatch(/^functions_write_file_0_[0-9a-f]{16}$/);
    expect(calls[2]).toBe("call_0");
    anthropic.script({ blocks: [{ type: "text", text: "Again." }] });
    await step(claude({ thinking: undefined }), history);
    expect(anthropic.requests[1]!.body.messages).toEqual(anthropic.requests[0]!.body.messages);
  });

  it("an id the API accepts goes out unchanged", async () => {
    anthropic.script({ blocks: [{ type: "text", text: "ok" }] });
    await step(claude({ thinking: undefined }), foreignToolTurn("toolu_01A09q90qw90lq917835lq9"));
    expect(JSON.stringify(anthropic.requests[0]!.body)).toContain('"toolu_01A09q90qw90lq917835lq9"');
  });
});
