/**
 * Contracts §13 at the provider boundary: the real SDKs against local servers that speak each
 * wire protocol and reject what the real services reject (fake-anthropic.ts,
 * fake-openai-responses.ts). Thinking blocks and reasoning items are captured whole as
 * `providerState`, replayed byte for byte to the same provider, left out for another one;
 * cache breakpoints; usage with cache and reasoning tokens; Responses stop reasons; prices.
 */
import { describe, expect, it } from "vitest";
import type { Message } from "../src/shared/messages.js";
import { costOf, parsePrices } from "../src/shared/prices.js";
import { callModel } from "../src/worker/call-model.js";
import { buildAnthropicRequest } from "../src/worker/models/anthropic-request.js";
import { OpenAIModel } from "../src/worker/models/openai.js";
import { signatureOf, validateRequest } from "./support/fake-anthropic.js";
import { useFakeProviders } from "./support/fake-providers.js";
import { claudeAt, gpt, noSleep, req, step } from "./support/model-steps.js";

const fakes = useFakeProviders();

const claude = (extra: Record<string, unknown> = {}) => claudeAt(fakes.anthropic.url, extra);

describe("anthropic thinking", () => {
  it("captures thinking, text and tool_use in order; replays them byte for byte after the tool turn", async () => {
    const thinking = "The user wants a file. I'll write it — «carefully».";
    fakes.anthropic.script(
      {
        blocks: [
          { type: "thinking", thinking },
          { type: "text", text: "Writing." },
          { type: "tool_use", id: "toolu_1", name: "write_file", input: { path: "a" } },
        ],
        stopReason: "tool_use",
        usage: { input_tokens: 100, output_tokens: 40, cache_creation_input_tokens: 900 },
      },
      {
        blocks: [{ type: "text", text: "Done." }],
        usage: { input_tokens: 30, output_tokens: 5, cache_read_input_tokens: 900 },
      },
    );
    const history: Message[] = [{ role: "user", content: "write a" }];
    const first = await step(claude(), history);
    expect(fakes.anthropic.requests[0]!.body.thinking).toEqual({ type: "enabled", budget_tokens: 2048 });
    expect(first).toMatchObject({
      stopReason: "tool_use",
      toolCalls: [{ id: "toolu_1", name: "write_file", arguments: { path: "a" } }],
      usage: { inputTokens: 1000, outputTokens: 40, cacheWriteTokens: 900, cacheReadTokens: 0 },
      providerState: {
        provider: "anthropic",
        api: "messages",
        target: fakes.anthropic.url,
        content: [
          { type: "thinking", thinking, signature: signatureOf(thinking) },
          { type: "text", text: "Writing." },
          { type: "tool_use", id: "toolu_1", name: "write_file" },
        ],
      },
    });
    history.push(first, {
      role: "tool",
      toolCallId: "toolu_1",
      name: "write_file",
      content: "wrote a",
      success: true,
    });
    const second = await step(claude(), history);
    expect(second).toMatchObject({ content: "Done.", usage: { inputTokens: 930, cacheReadTokens: 900 } });
    const replayed = fakes.anthropic.requests[1]!.body.messages[1]!;
    expect(replayed).toEqual({
      role: "assistant",
      content: [
        { type: "thinking", thinking, signature: signatureOf(thinking) },
        { type: "text", text: "Writing." },
        { type: "tool_use", id: "toolu_1", name: "write_file", input: { path: "a" } },
      ],
    });
    // Breakpoints: system, last tool, last user turn (and the one before it): at most 4.
    const body = fakes.anthropic.requests[1]!.body as Record<string, unknown> & {
      messages: { content: unknown }[];
    };
    expect(JSON.stringify(body).match(/cache_control/g)?.length).toBeLessThanOrEqual(4);
    expect((body.system as { cache_control?: unknown }[])[0]!.cache_control).toEqual({ type: "ephemeral" });
    expect((body.tools as { cache_control?: unknown }[]).at(-1)!.cache_control).toEqual({
      type: "ephemeral",
    });
    const lastTurn = body.messages.at(-1)!.content as { cache_control?: unknown }[];
    expect(lastTurn.at(-1)!.cache_control).toEqual({ type: "ephemeral" });
  });

  it("a tool-result turn without the thinking blocks (which the API refuses with thinking on) goes without thinking", async () => {
    const history: Message[] = [
      { role: "user", content: "write a" },
      {
        role: "assistant",
        content: "Writing.",
        toolCalls: [{ id: "toolu_1", name: "write_file", arguments: {} }],
        stopReason: "tool_use",
      },
      { role: "tool", toolCallId: "toolu_1", name: "write_file", content: "ok", success: true },
    ];
    // The fake refuses it as the API does…
    const body = buildAnthropicRequest(claude().config, req(history));
    expect(
      validateRequest({ ...body, thinking: { type: "enabled", budget_tokens: 2048 } }, new Set()),
    ).toMatch(/must start with a thinking block/);
    // …so the fleet sends that turn without thinking (provider-wire-anthropic.test.ts).
    fakes.anthropic.script({ blocks: [{ type: "text", text: "Done." }] });
    const result = await callModel(claude(), req(history), { sleep: noSleep });
    expect(result).toMatchObject({ ok: true, message: { content: "Done." } });
    expect(fakes.anthropic.requests[0]!.body).not.toHaveProperty("thinking");
  });

  it("adaptive thinking and redacted_thinking blocks; cache: false sends no breakpoint", async () => {
    fakes.anthropic.script(
      {
        blocks: [
          { type: "redacted_thinking", data: "REDACTED-opaque==" },
          { type: "tool_use", id: "t2", name: "write_file", input: {} },
        ],
        stopReason: "tool_use",
      },
      { blocks: [{ type: "text", text: "ok" }] },
    );
    const model = claude({ thinking: { type: "adaptive" }, cache: false });
    const history: Message[] = [{ role: "user", content: "go" }];
    const first = await step(model, history);
    expect(fakes.anthropic.requests[0]!.body.thinking).toEqual({ type: "adaptive" });
    expect(JSON.stringify(fakes.anthropic.requests[0]!.body)).not.toContain("cache_control");
    history.push(first, { role: "tool", toolCallId: "t2", name: "write_file", content: "x", success: true });
    await step(model, history);
    expect(fakes.anthropic.requests[1]!.body.messages[1]!.content).toEqual([
      { type: "redacted_thinking", data: "REDACTED-opaque==" },
      { type: "tool_use", id: "t2", name: "write_file", input: {} },
    ]);
  });

  it('a thinking block stored unsigned by an earlier release (signature "") is not sent back', async () => {
    const half = "Let me think about this very long";
    fakes.anthropic.script(
      {
        blocks: [
          { type: "thinking", thinking: half },
          { type: "text", text: "Part" },
        ],
        stopReason: "max_tokens",
      },
      { blocks: [{ type: "text", text: "The rest." }] },
    );
    const history: Message[] = [{ role: "user", content: "go" }];
    const first = await step(claude(), history);
    expect(first).toMatchObject({
      stopReason: "max_output",
      providerState: { content: [{ type: "thinking", thinking: half }, { type: "text" }] },
    });
    // This release keeps no unsigned block (provider-wire-anthropic.test.ts); an earlier one
    // stored it with signature "", as a history in the database may still hold it.
    const state = first.providerState as { content: Array<Record<string, unknown>> };
    state.content[0] = { ...state.content[0], signature: "" };
    history.push(first, { role: "internal", content: "Your previous response was cut off. Continue." });
    // The API answers 400 "Invalid `signature` in `thinking` block" to a block sent back unsigned.
    expect(await step(claude(), history)).toMatchObject({ content: "The rest." });
    expect(fakes.anthropic.requests[1]!.body.messages[1]).toEqual({
      role: "assistant",
      content: [{ type: "text", text: "Part" }],
    });
  });

  it("a stream cut after thinking and text keeps no providerState (interrupted)", async () => {
    fakes.anthropic.script({
      blocks: [
        { type: "thinking", thinking: "hmm" },
        { type: "text", text: "partial answer", chunks: ["partial ", "answer"] },
      ],
      cutAfterEvents: 9,
    });
    const message = await step(claude(), [{ role: "user", content: "go" }]);
    expect(message.stopReason).toBe("interrupted");
    expect(message).not.toHaveProperty("providerState");
  });
});

describe("openai responses", () => {
  it("a tool session: reasoning items kept with encrypted content and replayed before the call", async () => {
    fakes.responses.script(
      {
        reasoning: true,
        functionCalls: [{ callId: "call_1", name: "write_file", arguments: '{"path":"a"}' }],
        usage: { input_tokens: 50, output_tokens: 30, cached_tokens: 20, reasoning_tokens: 25 },
      },
      { text: ["Do", "ne."] },
    );
    const model = new OpenAIModel(
      {
        provider: "openai",
        model: "gpt-test",
        baseUrl: fakes.responses.url,
        api: "responses",
        reasoningEffort: "high",
      },
      { keyless: true },
    );
    const history: Message[] = [{ role: "user", content: "write a" }];
    const first = await step(model, history);
    const sent = fakes.responses.requests[0]!.body;
    expect(sent).toMatchObject({
      store: false,
      include: ["reasoning.encrypted_content"],
      instructions: "Be brief.",
      reasoning: { effort: "high" },
      input: [{ role: "user", content: "write a" }],
      tools: [{ type: "function", name: "write_file" }],
    });
    expect(first).toMatchObject({
      stopReason: "tool_use",
      toolCalls: [{ id: "call_1", name: "write_file", arguments: { path: "a" } }],
      usage: { inputTokens: 50, outputTokens: 30, cacheReadTokens: 20, reasoningTokens: 25 },
      providerState: { provider: "openai", api: "responses", target: fakes.responses.url },
    });
    const items = first.providerState!.output as { type: string; encrypted_content?: string }[];
    expect(items[0]).toMatchObject({ type: "reasoning", encrypted_content: expect.stringMatching(/^enc_/) });
    history.push(first, {
      role: "tool",
      toolCallId: "call_1",
      name: "write_file",
      content: "ok",
      success: true,
    });
    const second = await step(model, history);
    expect(second).toMatchObject({ content: "Done.", stopReason: "end_turn" });
    expect(fakes.responses.requests[1]!.body.input).toEqual([
      { role: "user", content: "write a" },
      items[0],
      expect.objectContaining({ type: "function_call", call_id: "call_1", arguments: '{"path":"a"}' }),
      { type: "function_call_output", call_id: "call_1", output: "ok" },
    ]);
    // The same history without its state is refused, as OpenAI refuses it.
    const { providerState: _dropped, ...bare } = first;
    const refused = await callModel(model, req([history[0]!, bare, history[2]!]), { sleep: noSleep });
    expect(!refused.ok && refused.error).toMatch(/without its required 'reasoning' item/);
  });

  it("stop reasons: cut → interrupted (no state); max_output_tokens → max_output; content_filter → refusal", async () => {
    const model = gpt("responses", fakes.responses.url);
    fakes.responses.script(
      { reasoning: true, text: ["Half ", "of it"], cutAfterEvents: 5 },
      { text: ["Long"], incomplete: "max_output_tokens" },
      { text: ["No"], incomplete: "content_filter" },
    );
    const cut = await step(model, [{ role: "user", content: "a" }]);
    expect(cut).toMatchObject({ stopReason: "interrupted", content: "Half " });
    expect(cut).not.toHaveProperty("providerState");
    expect(await step(model, [{ role: "user", content: "b" }])).toMatchObject({
      stopReason: "max_output",
      content: "Long",
    });
    expect(await step(model, [{ role: "user", content: "c" }])).toMatchObject({ stopReason: "refusal" });
  });
});

describe("providerState goes only to the same provider", () => {
  const thinking = "secret chain of thought";
  const withState: Message[] = [
    { role: "user", content: "write a" },
    {
      role: "assistant",
      content: "Writing.",
      toolCalls: [{ id: "toolu_1", name: "write_file", arguments: {} }],
      stopReason: "tool_use",
      providerState: {
        provider: "anthropic",
        api: "messages",
        target: "http://127.0.0.1:1",
        content: [
          { type: "thinking", thinking, signature: signatureOf(thinking) },
          { type: "tool_use", id: "toolu_1", name: "write_file" },
        ],
      },
    },
    { role: "tool", toolCallId: "toolu_1", name: "write_file", content: "ok", success: true },
  ];

  it("to openai (chat and responses): no thinking block, no signature", async () => {
    fakes.chat.enqueue({ text: ["fine"] });
    fakes.responses.script({ text: ["fine"] });
    await step(gpt("chat", fakes.chat.url), withState);
    await step(gpt("responses", fakes.responses.url), withState);
    for (const body of [fakes.chat.requests[0]!.body, fakes.responses.requests[0]!.body]) {
      expect(JSON.stringify(body)).not.toContain(thinking);
      expect(JSON.stringify(body)).not.toContain("signature");
    }
  });

  it("to another anthropic target: not replayed (plain text and tool_use)", async () => {
    fakes.anthropic.script({ blocks: [{ type: "text", text: "ok" }] });
    await step(claude({ thinking: undefined }), withState);
    expect(JSON.stringify(fakes.anthropic.requests[0]!.body)).not.toContain(thinking);
  });
});

describe("a cut-off step's text goes back; a state on it never does", () => {
  // The worker stores none on an interrupted step and parseHistory refuses one; this is a
  // history written some other way (a library caller, an older row), sent to its own target.
  const secret = "thought that was cut";
  const cut = (state: Record<string, unknown>): Message[] => [
    { role: "user", content: "go" },
    { role: "assistant", content: "Half of it", stopReason: "interrupted", providerState: state },
    { role: "internal", content: "Your previous response was cut off. Write it again." },
  ];
  const targetOf = (url: string) => new URL(url).href.replace(/\/+$/, "");

  it("anthropic", async () => {
    fakes.anthropic.script({ blocks: [{ type: "text", text: "ok" }] });
    const state = {
      provider: "anthropic",
      api: "messages",
      target: targetOf(fakes.anthropic.url),
      content: [{ type: "thinking", thinking: secret, signature: signatureOf(secret) }],
    };
    await step(claude(), cut(state));
    const body = JSON.stringify(fakes.anthropic.requests[0]!.body);
    expect(body).toContain("Half of it");
    expect(body).not.toContain(secret);
  });

  it.each(["chat", "responses"] as const)("openai %s", async (api) => {
    const server = api === "chat" ? fakes.chat : fakes.responses;
    if (api === "chat") fakes.chat.enqueue({ text: ["ok"] });
    else fakes.responses.script({ text: ["ok"] });
    const state = {
      provider: "openai",
      api,
      target: targetOf(server.url),
      output: [{ type: "reasoning", id: "rs_1", encrypted_content: `enc_${secret}` }],
    };
    await step(gpt(api, server.url), cut(state));
    const body = JSON.stringify(server.requests[0]!.body);
    expect(body).toContain("Half of it");
    expect(body).not.toContain(secret);
  });
});

describe("prices", () => {
  it("parses FLEET_PRICES and names every bad entry in one line", () => {
    const table = parsePrices(
      '{"claude-test": {"input": 3, "output": 15, "cacheRead": 0.3, "cacheWrite": 3.75}}',
    );
    expect(table.get("claude-test")).toEqual({ input: 3, output: 15, cacheRead: 0.3, cacheWrite: 3.75 });
    expect(() =>
      parsePrices('{"a": {"input": -1, "output": 1}, "b": {"output": 2}, "c": {"input": 1, "output": 1}}'),
    ).toThrow(/FLEET_PRICES.*bad entries: "a" \(input: .*\); "b" \(input: .*\)/);
    expect(() => parsePrices("/nonexistent/prices.json")).toThrow(/FLEET_PRICES.*cannot read/);
  });

  it("costs uncached input, cache reads, cache writes and output at their prices", () => {
    const price = { input: 3, output: 15, cacheRead: 0.3, cacheWrite: 3.75 };
    const usage = { inputTokens: 1000, outputTokens: 40, cacheReadTokens: 0, cacheWriteTokens: 900 };
    expect(costOf(usage, price)).toBeCloseTo((100 * 3 + 900 * 3.75 + 40 * 15) / 1e6, 12);
    expect(costOf({ inputTokens: 10, outputTokens: 10 }, { input: 1, output: 2 })).toBeCloseTo(30e-6, 12);
  });
});
