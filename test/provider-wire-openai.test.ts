/**
 * The OpenAI adapters (chat completions and the Responses API) against what the APIs send and
 * refuse (contracts §13, resume-semantics §6), through the real SDK and fake-openai.ts /
 * fake-openai-responses.ts, which speak the wire protocols and refuse what OpenAI refuses: a
 * reasoning item without its following item, encrypted reasoning asked of a model that does
 * not reason, a tool call id over 40 characters. Then the wire details the adapters read as
 * the SDK's types document them (these matched). The Anthropic side:
 * provider-wire-anthropic.test.ts.
 */
import { describe, expect, it } from "vitest";
import type { Message } from "../src/shared/messages.js";
import { resumePoint } from "../src/shared/resume-point.js";
import { callModel } from "../src/worker/call-model.js";
import { OpenAIModel } from "../src/worker/models/openai.js";
import { useFakeProviders } from "./support/fake-providers.js";
import { foreignToolTurn, gpt, noSleep, req, step } from "./support/model-steps.js";

/** The internal message a `continue_response` resume appends (resume-plan.ts's wording is not asserted). */
const CONTINUE: Message = { role: "internal", content: "Continue exactly where you stopped." };

const fakes = useFakeProviders();

describe("openai responses: a reasoning item goes back only with the item that follows it", () => {
  it("max_output_tokens reached while reasoning: continue_response leaves the lone reasoning item out", async () => {
    const model = gpt("responses", fakes.responses.url);
    fakes.responses.script({ reasoning: true, incomplete: "max_output_tokens" }, { text: ["Done."] });
    const history: Message[] = [{ role: "user", content: "think hard" }];
    const first = await step(model, history);
    expect(first).toMatchObject({ content: "", stopReason: "max_output" });
    expect(resumePoint([...history, first])).toMatchObject({ resumable: true, kind: "continue_response" });
    history.push(first, CONTINUE);
    const second = await step(model, history);
    expect(second).toMatchObject({ content: "Done.", stopReason: "end_turn" });
    expect(fakes.responses.requests[1]!.body.input).toEqual([
      { role: "user", content: "think hard" },
      { role: "user", content: CONTINUE.content },
    ]);
  });

  it("max_output_tokens in a call after reasoning: neither the call nor its reasoning is replayed", async () => {
    const model = gpt("responses", fakes.responses.url);
    fakes.responses.script(
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
    expect(fakes.responses.requests[1]!.body.input).toEqual([
      { role: "user", content: "write" },
      { role: "user", content: CONTINUE.content },
    ]);
  });

  it("max_output_tokens after some text: the reasoning goes back with its message item", async () => {
    const model = gpt("responses", fakes.responses.url);
    fakes.responses.script(
      { reasoning: true, text: ["Half"], incomplete: "max_output_tokens" },
      { text: ["ok"] },
    );
    const history: Message[] = [{ role: "user", content: "write" }];
    const first = await step(model, history);
    expect(first).toMatchObject({ content: "Half", stopReason: "max_output" });
    history.push(first, CONTINUE);
    await step(model, history);
    const input = fakes.responses.requests[1]!.body.input as { type?: string }[];
    expect(input.map((item) => item.type ?? "plain")).toEqual(["plain", "reasoning", "message", "plain"]);
  });
});

describe("openai responses: a model that does not reason refuses encrypted reasoning", () => {
  it("gpt-4o-mini: asked again without include, in the same attempt; its next requests go without it", async () => {
    fakes.responses.script({ text: ["Hello"] }, { text: ["Again"] });
    const model = new OpenAIModel(
      { provider: "openai", model: "gpt-4o-mini", baseUrl: fakes.responses.url, api: "responses" },
      { keyless: true },
    );
    const result = await callModel(model, req([{ role: "user", content: "hi" }]), {
      sleep: noSleep,
      policy: { maxAttempts: 1, baseDelayMs: 1, maxDelayMs: 1 },
    });
    expect(result).toMatchObject({ ok: true, attempts: 1, message: { content: "Hello" } });
    expect(fakes.responses.requests.map((r) => r.body.include)).toEqual([
      ["reasoning.encrypted_content"],
      undefined,
    ]);
    expect(fakes.responses.requests[1]!.body).toMatchObject({ store: false, model: "gpt-4o-mini" });
    await step(model, [{ role: "user", content: "again" }]);
    expect(fakes.responses.requests).toHaveLength(3);
    expect(fakes.responses.requests[2]!.body).not.toHaveProperty("include");
  });

  it("a reasoning model keeps asking for it", async () => {
    fakes.responses.script({ reasoning: true, text: ["ok"] });
    await step(gpt("responses", fakes.responses.url), [{ role: "user", content: "hi" }]);
    expect(fakes.responses.requests[0]!.body.include).toEqual(["reasoning.encrypted_content"]);
  });
});

describe("openai responses: response.failed", () => {
  const failOnce = async () => {
    const result = await callModel(
      gpt("responses", fakes.responses.url),
      req([{ role: "user", content: "go" }]),
      {
        sleep: noSleep,
        policy: { maxAttempts: 2, baseDelayMs: 1, maxDelayMs: 1 },
      },
    );
    return result;
  };

  it("server_error before any output is retried like a 500", async () => {
    fakes.responses.script(
      { failed: { code: "server_error", message: "The server had an error" } },
      { text: ["ok"] },
    );
    const result = await failOnce();
    expect(result).toMatchObject({ ok: true, attempts: 2, message: { content: "ok" } });
  });

  it.each(["invalid_prompt", "bio_policy", "data_residency_mismatch", "image_content_policy_violation"])(
    "%s: the same request would fail again, so it is refused at once (not retried)",
    async (code) => {
      fakes.responses.script({ failed: { code, message: `refused: ${code}` } });
      const result = await failOnce();
      expect(result).toMatchObject({ ok: false, rejected: true, attempts: 1 });
      expect(!result.ok && result.error).toContain(code);
      expect(fakes.responses.requests).toHaveLength(1);
    },
  );

  it("after output: interrupted with the text kept", async () => {
    fakes.responses.script({ text: ["Half ", "of it"], failed: { code: "server_error", message: "boom" } });
    const message = await step(gpt("responses", fakes.responses.url), [{ role: "user", content: "go" }]);
    expect(message).toMatchObject({ content: "Half of it", stopReason: "interrupted" });
  });
});

describe("openai responses: what the Responses API sends, read as documented (these matched)", () => {
  it("a function call's call_id (not its item id) is the call's id; its result goes back under it", async () => {
    fakes.responses.script(
      { functionCalls: [{ callId: "call_77", name: "write_file", arguments: "{}" }] },
      { text: ["ok"] },
    );
    const model = gpt("responses", fakes.responses.url);
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
    expect(fakes.responses.requests[1]!.body.input.slice(1)).toEqual([
      { type: "function_call", call_id: "call_77", name: "write_file", arguments: "{}" },
      { type: "function_call_output", call_id: "call_77", output: "ok" },
    ]);
  });
});

describe("openai responses: call ids another provider repeated from step to step", () => {
  it("go out distinct, each function_call_output with its call; the same history gives the same input", async () => {
    // A chat server that numbers calls per turn (call_0 every step) before a move to the
    // Responses API: OpenAI refuses two function_call items of one call_id ("Duplicate item
    // found with id fc_call_0"), so every request of the session was refused.
    fakes.responses.script({ text: ["Done."] }, { text: ["Again."] });
    const history: Message[] = [
      ...foreignToolTurn("call_0"),
      ...foreignToolTurn("call_0").slice(1),
      ...foreignToolTurn("call_0").slice(1),
    ];
    expect(await step(gpt("responses", fakes.responses.url), history)).toMatchObject({ content: "Done." });
    const input = fakes.responses.requests[0]!.body.input as { type?: string; call_id?: string }[];
    const calls = input.filter((item) => item.type === "function_call").map((item) => item.call_id);
    const outputs = input.filter((item) => item.type === "function_call_output").map((item) => item.call_id);
    expect(new Set(calls).size).toBe(3);
    expect(calls[0]).toBe("call_0");
    expect(outputs).toEqual(calls);
    await step(gpt("responses", fakes.responses.url), history);
    expect(fakes.responses.requests[1]!.body.input).toEqual(input);
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
    fakes.chat.enqueue(parallel("tool_calls"));
    const message = await step(gpt("chat", fakes.chat.url), [{ role: "user", content: "a and b" }]);
    expect(fakes.chat.requests[0]!.body.stream_options).toEqual({ include_usage: true });
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
    fakes.chat.enqueue(parallel("length"), { text: ["Some"], finishReason: "content_filter" });
    const history: Message[] = [{ role: "user", content: "a and b" }];
    const long = await step(gpt("chat", fakes.chat.url), history);
    expect(long.stopReason).toBe("max_output");
    expect(resumePoint([...history, long])).toMatchObject({ resumable: true, kind: "continue_response" });
    const filtered = await step(gpt("chat", fakes.chat.url), history);
    expect(filtered).toMatchObject({ content: "Some", stopReason: "refusal" });
    expect(resumePoint([...history, filtered])).toMatchObject({ resumable: false, reason: "refused" });
  });

  it("a refusal field (structured outputs) is the step's text, and the step is a refusal", async () => {
    fakes.chat.enqueue({
      deltas: [{ refusal: "I can't " }, { refusal: "help with that." }],
      finishReason: "stop",
    });
    const message = await step(gpt("chat", fakes.chat.url), [{ role: "user", content: "bad" }]);
    expect(message).toMatchObject({ content: "I can't help with that.", stopReason: "refusal" });
  });
});

describe("tool call ids another provider minted go out as OpenAI chat accepts them", () => {
  it("to OpenAI chat: an id over 40 characters is shortened, the same for the call and its result", async () => {
    fakes.chat.enqueue({ text: ["Done."] });
    const long = `chatcmpl-tool-${"9".repeat(32)}`;
    expect(long.length).toBeGreaterThan(40);
    expect(await step(gpt("chat", fakes.chat.url), foreignToolTurn(long))).toMatchObject({
      content: "Done.",
    });
    const messages = fakes.chat.requests[0]!.body.messages as Record<string, unknown>[];
    const id = (messages[2]!.tool_calls as { id: string }[])[0]!.id;
    expect(id).toMatch(/^call_[0-9a-f]{32}$/);
    expect(messages[3]).toMatchObject({ role: "tool", tool_call_id: id });
  });

  it("an id of 40 characters or fewer goes out unchanged", async () => {
    fakes.chat.enqueue({ text: ["ok"] });
    await step(gpt("chat", fakes.chat.url), foreignToolTurn("call_abc-123"));
    expect(JSON.stringify(fakes.chat.requests[0]!.body)).toContain('"call_abc-123"');
  });
});
