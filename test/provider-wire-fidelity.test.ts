/**
 * The model adapters against what the real APIs send and refuse (contracts §13,
 * resume-semantics §6), through the real SDKs and local servers that speak each wire protocol
 * (fake-anthropic.ts, fake-openai.ts, fake-openai-responses.ts): replays the real services
 * refuse (a reasoning item without its following item, a tool turn without its thinking
 * block, an unsigned thinking block), and the wire details of each API the adapters must read
 * as the SDKs' types document them.
 */
import { afterAll, beforeAll, beforeEach, describe, expect, it } from "vitest";
import type { AssistantMessage, Message } from "../src/shared/messages.js";
import { resumePoint } from "../src/shared/resume-point.js";
import { callModel } from "../src/worker/call-model.js";
import { AnthropicModel } from "../src/worker/models/anthropic.js";
import { OpenAIModel } from "../src/worker/models/openai.js";
import type { ModelRequest, ToolSpec } from "../src/worker/models/provider.js";
import { type FakeAnthropic, startFakeAnthropic } from "./support/fake-anthropic.js";
import { type FakeOpenAI, startFakeOpenAI } from "./support/fake-openai.js";
import { type FakeResponses, startFakeResponses } from "./support/fake-openai-responses.js";

const noSleep = async () => {};
const TOOLS: ToolSpec[] = [
  { name: "write_file", description: "Write a file", parameters: { type: "object", properties: {} } },
];

function req(history: Message[]): ModelRequest {
  return { sessionId: "s", system: "Be brief.", history, tools: TOOLS, signal: new AbortController().signal };
}

async function step(model: AnthropicModel | OpenAIModel, history: Message[]): Promise<AssistantMessage> {
  const result = await callModel(model, req(history), {
    sleep: noSleep,
    policy: { maxAttempts: 1, baseDelayMs: 1, maxDelayMs: 1 },
  });
  if (!result.ok) throw new Error(result.error);
  return result.message;
}

/** The internal message a `continue_response` resume appends (resume-plan.ts's wording is not asserted). */
const CONTINUE: Message = { role: "internal", content: "Continue exactly where you stopped." };

let anthropic: FakeAnthropic;
let responses: FakeResponses;
let chat: FakeOpenAI;
beforeAll(async () => {
  [anthropic, responses, chat] = await Promise.all([
    startFakeAnthropic(),
    startFakeResponses(),
    startFakeOpenAI(),
  ]);
});
afterAll(async () => {
  await Promise.all([anthropic?.close(), responses?.close(), chat?.close()]);
});
beforeEach(() => {
  anthropic.requests.length = 0;
  responses.requests.length = 0;
  chat.requests.length = 0;
});

const claude = (extra: Record<string, unknown> = {}) =>
  new AnthropicModel(
    {
      provider: "anthropic",
      model: "claude-test",
      baseUrl: anthropic.url,
      maxTokens: 8000,
      thinking: { type: "enabled", budgetTokens: 2048 },
      ...extra,
    },
    { keyless: true },
  );
const gpt = (api: "chat" | "responses", baseUrl: string) =>
  new OpenAIModel({ provider: "openai", model: "gpt-test", baseUrl, api }, { keyless: true });

describe("openai responses: a reasoning item goes back only with the item that follows it", () => {
  it("max_output_tokens reached while reasoning: continue_response leaves the lone reasoning item out", async () => {
    const model = gpt("responses", responses.url);
    responses.script({ reasoning: true, incomplete: "max_output_tokens" }, { text: ["Done."] });
    const history: Message[] = [{ role: "user", content: "think hard" }];
    const first = await step(model, history);
    expect(first).toMatchObject({ content: "", stopReason: "max_output" });
    expect(resumePoint([...history, first])).toMatchObject({ resumable: true, kind: "continue_response" });
    history.push(first, CONTINUE);
    const second = await step(model, history);
    expect(second).toMatchObject({ content: "Done.", stopReason: "end_turn" });
    expect(responses.requests[1]!.body.input).toEqual([
      { role: "user", content: "think hard" },
      { role: "user", content: CONTINUE.content },
    ]);
  });

  it("max_output_tokens in a call after reasoning: neither the call nor its reasoning is replayed", async () => {
    const model = gpt("responses", responses.url);
    responses.script(
      {
        reasoning: true,
        functionCalls: [{ callId: "call_9", name: "write_file", arguments: '{"pa' }],
        incomplete: "max_output_tokens",
      },
      { text: ["ok"] },
    );
    const history: Message[] = [{ role: "user", content: "write" }];
    const first = await step(model, history);
    expect(first.stopReason).toBe("max_output");
    history.push(first, CONTINUE);
    await step(model, history);
    expect(responses.requests[1]!.body.input).toEqual([
      { role: "user", content: "write" },
      { role: "user", content: CONTINUE.content },
    ]);
  });

  it("max_output_tokens after some text: the reasoning goes back with its message item", async () => {
    const model = gpt("responses", responses.url);
    responses.script({ reasoning: true, text: ["Half"], incomplete: "max_output_tokens" }, { text: ["ok"] });
    const history: Message[] = [{ role: "user", content: "write" }];
    const first = await step(model, history);
    expect(first).toMatchObject({ content: "Half", stopReason: "max_output" });
    history.push(first, CONTINUE);
    await step(model, history);
    const input = responses.requests[1]!.body.input as { type?: string }[];
    expect(input.map((item) => item.type ?? "plain")).toEqual(["plain", "reasoning", "message", "plain"]);
  });
});

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

describe("openai chat: what chat completions send, read as documented (these matched)", () => {
  const parallel = (finishReason: string) => ({
    deltas: [
      {
        tool_calls: [
          { index: 0, id: "call_a", type: "function", function: { name: "write_file", arguments: "" } },
        ],
      },
      {
        tool_calls: [
          { index: 1, id: "call_b", type: "function", function: { name: "write_file", arguments: "" } },
        ],
      },
      { tool_calls: [{ index: 0, function: { arguments: '{"path":' } }] },
      { tool_calls: [{ index: 1, function: { arguments: '{"path":"b"}' } }] },
      { tool_calls: [{ index: 0, function: { arguments: '"a"}' } }] },
    ],
    finishReason,
    usage: {
      prompt_tokens: 120,
      completion_tokens: 40,
      prompt_tokens_details: { cached_tokens: 64 },
      completion_tokens_details: { reasoning_tokens: 30 },
    },
  });

  it("parallel tool calls interleaved by index; usage only in the last chunk, with cached and reasoning tokens", async () => {
    chat.enqueue(parallel("tool_calls"));
    const message = await step(gpt("chat", chat.url), [{ role: "user", content: "a and b" }]);
    expect(chat.requests[0]!.body.stream_options).toEqual({ include_usage: true });
    expect(message).toMatchObject({
      stopReason: "tool_use",
      toolCalls: [
        { id: "call_a", name: "write_file", arguments: { path: "a" } },
        { id: "call_b", name: "write_file", arguments: { path: "b" } },
      ],
      usage: { inputTokens: 120, outputTokens: 40, cacheReadTokens: 64, reasoningTokens: 30 },
    });
  });

  it("finish_reason length with calls half-streamed: max_output, calls not replayed; content_filter: refusal", async () => {
    chat.enqueue(parallel("length"), { text: ["Some"], finishReason: "content_filter" });
    const history: Message[] = [{ role: "user", content: "a and b" }];
    const long = await step(gpt("chat", chat.url), history);
    expect(long.stopReason).toBe("max_output");
    expect(resumePoint([...history, long])).toMatchObject({ resumable: true, kind: "continue_response" });
    const filtered = await step(gpt("chat", chat.url), history);
    expect(filtered).toMatchObject({ content: "Some", stopReason: "refusal" });
    expect(resumePoint([...history, filtered])).toMatchObject({ resumable: false, reason: "refused" });
  });

  it("a refusal field (structured outputs) is the step's text, and the step is a refusal", async () => {
    chat.enqueue({ deltas: [{ refusal: "I can't " }, { refusal: "help with that." }], finishReason: "stop" });
    const message = await step(gpt("chat", chat.url), [{ role: "user", content: "bad" }]);
    expect(message).toMatchObject({ content: "I can't help with that.", stopReason: "refusal" });
  });
});

describe("openai responses: what the Responses API sends, read as documented (these matched)", () => {
  it("a function call's call_id (not its item id) is the call's id; its result goes back under it", async () => {
    responses.script(
      { functionCalls: [{ callId: "call_77", name: "write_file", arguments: "{}" }] },
      { text: ["ok"] },
    );
    const model = gpt("responses", responses.url);
    const history: Message[] = [{ role: "user", content: "go" }];
    const first = await step(model, history);
    expect(first.toolCalls).toEqual([{ id: "call_77", name: "write_file", arguments: {} }]);
    history.push(first, {
      role: "tool",
      toolCallId: "call_77",
      name: "write_file",
      content: "ok",
      success: true,
    });
    await step(model, history);
    expect(responses.requests[1]!.body.input.slice(1)).toEqual([
      { type: "function_call", call_id: "call_77", name: "write_file", arguments: "{}" },
      { type: "function_call_output", call_id: "call_77", output: "ok" },
    ]);
  });
});

describe("openai responses: response.failed", () => {
  const failOnce = async () => {
    const result = await callModel(gpt("responses", responses.url), req([{ role: "user", content: "go" }]), {
      sleep: noSleep,
      policy: { maxAttempts: 2, baseDelayMs: 1, maxDelayMs: 1 },
    });
    return result;
  };

  it("server_error before any output is retried like a 500", async () => {
    responses.script(
      { failed: { code: "server_error", message: "The server had an error" } },
      { text: ["ok"] },
    );
    const result = await failOnce();
    expect(result).toMatchObject({ ok: true, attempts: 2, message: { content: "ok" } });
  });

  it.each(["invalid_prompt", "bio_policy", "data_residency_mismatch", "image_content_policy_violation"])(
    "%s: the same request would fail again, so it is refused at once (not retried)",
    async (code) => {
      responses.script({ failed: { code, message: `refused: ${code}` } });
      const result = await failOnce();
      expect(result).toMatchObject({ ok: false, rejected: true, attempts: 1 });
      expect(!result.ok && result.error).toContain(code);
      expect(responses.requests).toHaveLength(1);
    },
  );

  it("after output: interrupted with the text kept", async () => {
    responses.script({ text: ["Half ", "of it"], failed: { code: "server_error", message: "boom" } });
    const message = await step(gpt("responses", responses.url), [{ role: "user", content: "go" }]);
    expect(message).toMatchObject({ content: "Half of it", stopReason: "interrupted" });
  });
});

describe("tool call ids another provider minted go out as the next one accepts them", () => {
  /** A tool turn from an OpenAI-compatible server (Kimi-style id) and one with vLLM's long id. */
  const foreign = (id: string): Message[] => [
    { role: "user", content: "write a" },
    {
      role: "assistant",
      content: "",
      toolCalls: [{ id, name: "write_file", arguments: { path: "a" } }],
      stopReason: "tool_use",
    },
    { role: "tool", toolCallId: id, name: "write_file", content: "ok", success: true },
  ];

  it("to Anthropic: an id outside ^[a-zA-Z0-9_-]+$ is rewritten, the same for the call and its result", async () => {
    anthropic.script({ blocks: [{ type: "text", text: "Done." }] });
    const history = foreign("functions.write_file:0");
    expect(await step(claude({ thinking: undefined }), history)).toMatchObject({ content: "Done." });
    const [, call, result] = anthropic.requests[0]!.body.messages as { content: Record<string, unknown>[] }[];
    const id = call!.content[0]!.id as string;
    expect(id).toMatch(/^[a-zA-Z0-9_-]+$/);
    expect(id).toMatch(/^functions_write_file_0_[0-9a-f]{16}$/);
    expect(result!.content[0]).toMatchObject({ type: "tool_result", tool_use_id: id });
    // The history keeps its own ids.
    expect(history[2]).toMatchObject({ toolCallId: "functions.write_file:0" });
  });

  it("to OpenAI chat: an id over 40 characters is shortened, the same for the call and its result", async () => {
    chat.enqueue({ text: ["Done."] });
    const long = `chatcmpl-tool-${"9".repeat(32)}`;
    expect(long.length).toBeGreaterThan(40);
    expect(await step(gpt("chat", chat.url), foreign(long))).toMatchObject({ content: "Done." });
    const messages = chat.requests[0]!.body.messages as Record<string, unknown>[];
    const id = (messages[2]!.tool_calls as { id: string }[])[0]!.id;
    expect(id).toMatch(/^call_[0-9a-f]{32}$/);
    expect(messages[3]).toMatchObject({ role: "tool", tool_call_id: id });
  });

  it("ids each provider accepts go out unchanged", async () => {
    anthropic.script({ blocks: [{ type: "text", text: "ok" }] });
    chat.enqueue({ text: ["ok"] });
    await step(claude({ thinking: undefined }), foreign("toolu_01A09q90qw90lq917835lq9"));
    await step(gpt("chat", chat.url), foreign("call_abc-123"));
    expect(JSON.stringify(anthropic.requests[0]!.body)).toContain('"toolu_01A09q90qw90lq917835lq9"');
    expect(JSON.stringify(chat.requests[0]!.body)).toContain('"call_abc-123"');
  });
});

describe("openai responses: a model that does not reason refuses encrypted reasoning", () => {
  it("gpt-4o-mini: asked again without include, in the same attempt; its next requests go without it", async () => {
    responses.script({ text: ["Hello"] }, { text: ["Again"] });
    const model = new OpenAIModel(
      { provider: "openai", model: "gpt-4o-mini", baseUrl: responses.url, api: "responses" },
      { keyless: true },
    );
    const result = await callModel(model, req([{ role: "user", content: "hi" }]), {
      sleep: noSleep,
      policy: { maxAttempts: 1, baseDelayMs: 1, maxDelayMs: 1 },
    });
    expect(result).toMatchObject({ ok: true, attempts: 1, message: { content: "Hello" } });
    expect(responses.requests.map((r) => r.body.include)).toEqual([
      ["reasoning.encrypted_content"],
      undefined,
    ]);
    expect(responses.requests[1]!.body).toMatchObject({ store: false, model: "gpt-4o-mini" });
    await step(model, [{ role: "user", content: "again" }]);
    expect(responses.requests).toHaveLength(3);
    expect(responses.requests[2]!.body).not.toHaveProperty("include");
  });

  it("a reasoning model keeps asking for it", async () => {
    responses.script({ reasoning: true, text: ["ok"] });
    await step(gpt("responses", responses.url), [{ role: "user", content: "hi" }]);
    expect(responses.requests[0]!.body.include).toEqual(["reasoning.encrypted_content"]);
  });
});
