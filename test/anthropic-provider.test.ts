/**
 * The Anthropic provider (src/worker/models/anthropic.ts) against a local server speaking
 * the Messages API wire protocol (test/support/fake-anthropic.ts): the real SDK, real HTTP,
 * real server-sent events — no mock of the SDK.
 */
import { createServer } from "node:http";
import type { AddressInfo } from "node:net";
import { afterAll, beforeAll, beforeEach, describe, expect, it, vi } from "vitest";
import type { Message } from "../src/shared/messages.js";
import {
  CONTINUE_RESPONSE_TEXT,
  INTERRUPTED_TOOL_TEXT,
  RETRY_RESPONSE_TEXT,
} from "../src/shared/resume-plan.js";
import { callModel } from "../src/worker/call-model.js";
import { AnthropicModel, MISSING_ANTHROPIC_KEY } from "../src/worker/models/anthropic.js";
import { toAnthropicMessages } from "../src/worker/models/anthropic-messages.js";
import { buildAnthropicRequest } from "../src/worker/models/anthropic-request.js";
import { type ModelEvent, type ModelRequest, ProviderError } from "../src/worker/models/provider.js";
import { type FakeAnthropic, type FakeStream, startFakeAnthropic } from "./support/fake-anthropic.js";

const KEY = "sk-ant-test-key-0123456789";

let fake: FakeAnthropic;
beforeAll(async () => {
  fake = await startFakeAnthropic();
});
afterAll(async () => fake?.close());
beforeEach(() => {
  fake.requests.length = 0;
  expect(fake.pending()).toBe(0);
});

function model(
  overrides: { maxTokens?: number; temperature?: number; baseUrl?: string; cache?: boolean } = {},
) {
  return new AnthropicModel(
    { provider: "anthropic", model: "claude-test", baseUrl: fake.url, ...overrides },
    { apiKey: KEY },
  );
}

function request(history: Message[] = [{ role: "user", content: "hi" }], signal?: AbortSignal): ModelRequest {
  return {
    sessionId: "s1",
    history,
    tools: [],
    signal: signal ?? new AbortController().signal,
  };
}

async function run(
  provider: AnthropicModel,
  req: ModelRequest = request(),
): Promise<{ events: ModelEvent[]; error?: unknown }> {
  const events: ModelEvent[] = [];
  try {
    // Usage reported before the step is whole is left out here (test/cut-step-usage.test.ts).
    for await (const event of provider.stream(req)) if (event.type !== "usage") events.push(event);
    return { events };
  } catch (error) {
    return { events, error };
  }
}

function text(events: ModelEvent[]): string {
  return events.map((e) => (e.type === "text" ? e.delta : "")).join("");
}

function recordingSleep() {
  const slept: number[] = [];
  return { slept, sleep: async (ms: number) => void slept.push(ms) };
}

/** `stream` read straight from the model, then again (requests cleared) through callModel with a recording sleep. */
async function directThenCallModel(stream: FakeStream) {
  fake.script(stream);
  const direct = await run(model());
  fake.requests.length = 0;
  fake.script(stream);
  const { sleep, slept } = recordingSleep();
  const step = await callModel(model(), request(), { sleep });
  return { direct, step, slept };
}

describe("stop reasons (resume-semantics.md §6)", () => {
  it.each([
    ["end_turn", "end_turn"],
    ["stop_sequence", "end_turn"],
    ["tool_use", "tool_use"],
    ["pause_turn", "paused"],
    ["max_tokens", "max_output"],
    ["refusal", "refusal"],
    ["model_context_window_exceeded", "context_full"],
    ["something_new_2027", "something_new_2027"],
  ])("stop_reason %s → %s", async (wire, normalised) => {
    fake.script({ blocks: [{ type: "text", text: "Hello" }], stopReason: wire });
    const { events, error } = await run(model());
    expect(error).toBeUndefined();
    expect(events.at(-1)).toMatchObject({ type: "done", stopReason: normalised });
    expect(text(events)).toBe("Hello");
  });
});

describe("streaming", () => {
  it("streams text deltas in order and maps usage", async () => {
    fake.script({
      blocks: [{ type: "text", text: "Hello, world", chunks: ["Hel", "lo, ", "world"] }],
      usage: { input_tokens: 123, output_tokens: 45 },
    });
    const { events } = await run(model());
    expect(events).toEqual([
      { type: "text", delta: "Hel" },
      { type: "text", delta: "lo, " },
      { type: "text", delta: "world" },
      {
        type: "done",
        stopReason: "end_turn",
        usage: { inputTokens: 123, outputTokens: 45, cacheReadTokens: 0, cacheWriteTokens: 0 },
      },
    ]);
  });

  it("assembles tool_use input from input_json_delta fragments into complete calls", async () => {
    fake.script({
      blocks: [
        { type: "text", text: "Writing." },
        {
          type: "tool_use",
          id: "toolu_1",
          name: "write_file",
          input: { path: "notes.txt", content: "hi" },
          jsonChunks: ['{"path": "no', 'tes.txt", "con', 'tent": "hi"}'],
        },
        { type: "tool_use", id: "toolu_2", name: "list", input: {}, jsonChunks: [""] },
        { type: "tool_use", id: "toolu_3", name: "broken", input: {}, jsonChunks: ['{"path": "a'] },
      ],
      stopReason: "tool_use",
    });
    const { events, error } = await run(model());
    expect(error).toBeUndefined();
    expect(events.filter((e) => e.type === "tool_call")).toEqual([
      {
        type: "tool_call",
        call: { id: "toolu_1", name: "write_file", arguments: { path: "notes.txt", content: "hi" } },
      },
      { type: "tool_call", call: { id: "toolu_2", name: "list", arguments: {} } },
      { type: "tool_call", call: { id: "toolu_3", name: "broken", arguments: { _raw: '{"path": "a' } } },
    ]);
    expect(events.at(-1)).toMatchObject({ type: "done", stopReason: "tool_use" });
  });

  it("a stream cut mid-text ends without done; through callModel it is interrupted with the partial, called once", async () => {
    // Events: 0 message_start, 1 block start, 2-4 deltas, ...: cut after the 2nd delta.
    const { direct, step, slept } = await directThenCallModel({
      blocks: [{ type: "text", text: "Hello world", chunks: ["Hello ", "wor", "ld"] }],
      cutAfterEvents: 4,
    });
    expect(direct.error).toBeUndefined();
    expect(direct.events).toEqual([
      { type: "text", delta: "Hello " },
      { type: "text", delta: "wor" },
    ]);
    expect(step).toMatchObject({
      ok: true,
      attempts: 1,
      message: { role: "assistant", content: "Hello wor", stopReason: "interrupted" },
    });
    expect(fake.requests).toHaveLength(1);
    expect(slept).toEqual([]);
  });

  it("a stream cut before any output fails retryably, so the runtime retries it", async () => {
    fake.script({ blocks: [{ type: "text", text: "Hello" }], cutAfterEvents: 1 });
    const { events, error } = await run(model());
    expect(events).toEqual([]);
    expect(error).toBeInstanceOf(ProviderError);
    expect((error as ProviderError).retryable).toBe(true);

    fake.requests.length = 0;
    fake.script(
      { blocks: [{ type: "text", text: "Hello" }], cutAfterEvents: 2 },
      { blocks: [{ type: "text", text: "Hi" }] },
    );
    const { sleep } = recordingSleep();
    const step = await callModel(model(), request(), { sleep });
    expect(step).toMatchObject({ ok: true, attempts: 2, message: { content: "Hi", stopReason: "end_turn" } });
    expect(fake.requests).toHaveLength(2);
  });

  it("a message_stop without any stop reason is not a whole step", async () => {
    fake.script({ blocks: [{ type: "text", text: "Hello" }], stopReason: null });
    const { events, error } = await run(model());
    expect(error).toBeUndefined();
    expect(events).toEqual([{ type: "text", delta: "Hello" }]);
  });

  it("a stream that breaks after message_delta, before message_stop, is interrupted with its text kept", async () => {
    // Events: 0 message_start, 1 block start, 2-3 deltas, 4 block stop, 5 message_delta, 6 message_stop.
    const { direct, step, slept } = await directThenCallModel({
      blocks: [{ type: "text", text: "Hello world", chunks: ["Hello ", "world"] }],
      cutAfterEvents: 6,
    });
    expect(direct.error).toBeUndefined();
    expect(direct.events).toEqual([
      { type: "text", delta: "Hello " },
      { type: "text", delta: "world" },
    ]);
    expect(step).toEqual({
      ok: true,
      attempts: 1,
      message: { role: "assistant", content: "Hello world", stopReason: "interrupted" },
      // Billed though cut short: the budget counts an estimate (call-model.ts), at least what
      // message_start and message_delta reported (their cache counts too).
      estimatedUsage: {
        inputTokens: expect.any(Number),
        outputTokens: expect.any(Number),
        cacheReadTokens: 0,
        cacheWriteTokens: 0,
      },
    });
    expect(fake.requests).toHaveLength(1);
    expect(slept).toEqual([]);
  });

  it("a response that ends cleanly without message_stop is interrupted too", async () => {
    const { direct, step } = await directThenCallModel({
      blocks: [{ type: "text", text: "Hello" }],
      omitMessageStop: true,
    });
    expect(direct.error).toBeUndefined();
    expect(direct.events).toEqual([{ type: "text", delta: "Hello" }]);
    expect(step).toMatchObject({
      ok: true,
      attempts: 1,
      message: { content: "Hello", stopReason: "interrupted" },
    });
  });

  it("no message_stop and no output (an empty response) fails retryably", async () => {
    fake.script({ blocks: [], omitMessageStop: true });
    const { events, error } = await run(model());
    expect(events).toEqual([]);
    expect(error).toBeInstanceOf(ProviderError);
    expect((error as ProviderError).retryable).toBe(true);
    expect((error as ProviderError).message).toMatch(/before message_stop/);
  });

  it("an error event mid-stream throws a retryable ProviderError; after output callModel keeps the partial", async () => {
    fake.script({
      blocks: [{ type: "text", text: "Hello" }],
      errorAfterEvents: 1,
      errorEvent: { type: "overloaded_error", message: "Overloaded" },
    });
    const before = await run(model());
    expect(before.events).toEqual([]);
    expect(before.error).toBeInstanceOf(ProviderError);
    expect((before.error as ProviderError).retryable).toBe(true);
    expect((before.error as ProviderError).message).toMatch(/overloaded/i);

    fake.requests.length = 0;
    fake.script({
      blocks: [{ type: "text", text: "Hello world", chunks: ["Hello", " world"] }],
      errorAfterEvents: 3,
      errorEvent: { type: "overloaded_error", message: "Overloaded" },
    });
    const { sleep } = recordingSleep();
    const step = await callModel(model(), request(), { sleep });
    expect(step).toMatchObject({
      ok: true,
      attempts: 1,
      message: { content: "Hello", stopReason: "interrupted" },
    });
    expect(fake.requests).toHaveLength(1);
  });

  it("passes the AbortSignal through: aborting mid-stream closes the request", async () => {
    fake.script({
      blocks: [{ type: "text", text: "abcdef", chunks: ["a", "b", "c", "d", "e", "f"] }],
      eventDelayMs: 200,
    });
    const controller = new AbortController();
    const events: ModelEvent[] = [];
    try {
      for await (const event of model().stream(request(undefined, controller.signal))) {
        events.push(event);
        if (event.type === "text") controller.abort();
      }
    } catch {
      // An abort may surface as an error; either way no `done` arrives.
    }
    expect(events.some((e) => e.type === "done")).toBe(false);
    // Stopped at the abort (the first chunk), not after the stream's six chunks 200 ms apart.
    expect(events.filter((e) => e.type === "text")).toHaveLength(1);
    // And the request was closed by the client before the server had sent it all.
    await vi.waitFor(() => expect(fake.requests[0]?.clientClosed).toBe(true), {
      timeout: 10_000,
      interval: 10,
    });
  });
});

describe("errors", () => {
  it("429 with retry-after is retried once after retry-after, then succeeds", async () => {
    fake.script(
      {
        status: 429,
        headers: { "retry-after": "3" },
        error: { type: "rate_limit_error", message: "Number of request tokens has exceeded your rate limit" },
      },
      { blocks: [{ type: "text", text: "ok" }] },
    );
    const { sleep, slept } = recordingSleep();
    const step = await callModel(model(), request(), { sleep });
    expect(step).toMatchObject({ ok: true, attempts: 2, message: { content: "ok", stopReason: "end_turn" } });
    expect(slept).toEqual([3000]);
    expect(fake.requests).toHaveLength(2);
  });

  it("429 is a retryable ProviderError carrying retryAfterMs", async () => {
    fake.script({
      status: 429,
      headers: { "retry-after": "2" },
      error: { type: "rate_limit_error", message: "rate limited" },
    });
    const { error } = await run(model());
    expect(error).toBeInstanceOf(ProviderError);
    expect(error).toMatchObject({ retryable: true, retryAfterMs: 2000 });
    expect(fake.requests).toHaveLength(1); // the SDK itself does not retry (maxRetries: 0)
  });

  it.each([
    [529, "overloaded_error", "Overloaded"],
    [500, "api_error", "Internal server error"],
    [503, "api_error", "Service unavailable"],
  ])("%i %s is retryable", async (status, type, message) => {
    fake.script({ status, error: { type, message } });
    const { events, error } = await run(model());
    expect(events).toEqual([]);
    expect(error).toBeInstanceOf(ProviderError);
    expect((error as ProviderError).retryable).toBe(true);
    expect((error as ProviderError).message).toContain(message);
    expect(fake.requests).toHaveLength(1);
  });

  it("400 prompt is too long → done context_full with no text, not an error", async () => {
    fake.script({
      status: 400,
      error: { type: "invalid_request_error", message: "prompt is too long: 215000 tokens > 200000 maximum" },
    });
    const { events, error } = await run(model());
    expect(error).toBeUndefined();
    expect(events).toEqual([{ type: "done", stopReason: "context_full" }]);

    fake.script({
      status: 400,
      error: { type: "invalid_request_error", message: "prompt is too long: 215000 tokens > 200000 maximum" },
    });
    const { sleep } = recordingSleep();
    const step = await callModel(model(), request(), { sleep });
    expect(step).toMatchObject({ ok: true, message: { content: "", stopReason: "context_full" } });
  });

  it("401 is not retryable and carries the provider's message", async () => {
    fake.script({ status: 401, error: { type: "authentication_error", message: "invalid x-api-key" } });
    const { error } = await run(model());
    expect(error).toBeInstanceOf(ProviderError);
    expect((error as ProviderError).retryable).toBe(false);
    expect((error as ProviderError).message).toMatch(/401/);
    expect((error as ProviderError).message).toMatch(/invalid x-api-key/);

    fake.script({ status: 401, error: { type: "authentication_error", message: "invalid x-api-key" } });
    const { sleep, slept } = recordingSleep();
    const step = await callModel(model(), request(), { sleep });
    expect(step).toMatchObject({ ok: false, attempts: 1 });
    expect(slept).toEqual([]);
  });

  it("another 400 is not retryable", async () => {
    fake.script({
      status: 400,
      error: { type: "invalid_request_error", message: "messages: roles must alternate" },
    });
    const { error } = await run(model());
    expect(error).toMatchObject({ retryable: false });
    expect((error as ProviderError).message).toContain("roles must alternate");
  });

  it("a refused connection is retryable", async () => {
    const server = createServer();
    await new Promise<void>((resolve) => server.listen(0, "127.0.0.1", resolve));
    const { port } = server.address() as AddressInfo;
    await new Promise<void>((resolve) => server.close(() => resolve()));
    const { error } = await run(model({ baseUrl: `http://127.0.0.1:${port}` }));
    expect(error).toBeInstanceOf(ProviderError);
    expect((error as ProviderError).retryable).toBe(true);
  });

  it("a missing API key fails non-retryably before any request", async () => {
    const provider = new AnthropicModel(
      { provider: "anthropic", model: "claude-test", baseUrl: fake.url },
      { apiKey: undefined },
    );
    const { error } = await run(provider);
    expect(error).toBeInstanceOf(ProviderError);
    expect((error as ProviderError).message).toBe(MISSING_ANTHROPIC_KEY);
    expect((error as ProviderError).retryable).toBe(false);
    expect(fake.requests).toHaveLength(0);
  });

  it("a keyless route (a raw baseUrl) sends a placeholder, never a key from process.env", async () => {
    const sentinel = "sk-ant-ENV-SENTINEL-0123456789";
    const saved = { key: process.env.ANTHROPIC_API_KEY, token: process.env.ANTHROPIC_AUTH_TOKEN };
    process.env.ANTHROPIC_API_KEY = sentinel;
    process.env.ANTHROPIC_AUTH_TOKEN = sentinel;
    try {
      fake.script({ blocks: [{ type: "text", text: "Hello" }] });
      const provider = new AnthropicModel(
        { provider: "anthropic", model: "claude-test", baseUrl: fake.url },
        { keyless: true },
      );
      const { events, error } = await run(provider);
      expect(error).toBeUndefined();
      expect(events.at(-1)).toMatchObject({ type: "done" });
      expect(fake.requests).toHaveLength(1);
      expect(JSON.stringify(fake.requests[0]!.headers)).not.toContain(sentinel);
      const auth = fake.requests[0]!.headers["x-api-key"] ?? fake.requests[0]!.headers.authorization;
      expect(String(auth)).toMatch(/no-key/);
    } finally {
      if (saved.key === undefined) delete process.env.ANTHROPIC_API_KEY;
      else process.env.ANTHROPIC_API_KEY = saved.key;
      if (saved.token === undefined) delete process.env.ANTHROPIC_AUTH_TOKEN;
      else process.env.ANTHROPIC_AUTH_TOKEN = saved.token;
    }
  });

  it("no error ever contains the API key, even when the provider echoes it", async () => {
    const errors: unknown[] = [];
    fake.script({
      status: 403,
      error: { type: "permission_error", message: `key ${KEY} may not use this model` },
    });
    errors.push((await run(model())).error);
    fake.script({ status: 401, error: { type: "authentication_error", message: "invalid x-api-key" } });
    errors.push((await run(model())).error);
    fake.script({ status: 529, error: { type: "overloaded_error", message: "Overloaded" } });
    errors.push((await run(model())).error);
    fake.script({
      blocks: [{ type: "text", text: "x" }],
      errorAfterEvents: 1,
      errorEvent: { type: "api_error", message: `internal ${KEY}` },
    });
    errors.push((await run(model())).error);
    expect(errors.every((e) => e instanceof ProviderError)).toBe(true);
    for (const error of errors) {
      expect(String((error as Error).message)).not.toContain(KEY);
      expect(JSON.stringify(error)).not.toContain(KEY);
      expect(String((error as Error).stack)).not.toContain(KEY);
    }
    expect((errors[0] as Error).message).toContain("[redacted]");
    // The provider object itself does not expose the key when serialised.
    expect(JSON.stringify(model())).not.toContain(KEY);
    // It did go to the server, as a bearer token.
    expect(fake.requests[0]?.headers.authorization).toBe(`Bearer ${KEY}`);
  });
});

describe("request conversion", () => {
  it("sends model, max_tokens (default 4096), stream, system and tools; never temperature", async () => {
    fake.script({ blocks: [{ type: "text", text: "ok" }] }, { blocks: [{ type: "text", text: "ok" }] });
    await run(model({ temperature: 0.3 }), {
      ...request(),
      system: "You are terse.",
      tools: [
        {
          name: "write_file",
          description: "Write a file",
          parameters: { type: "object", properties: { path: { type: "string" } }, required: ["path"] },
        },
      ],
    });
    await run(model({ maxTokens: 1000 }));
    const [first, second] = fake.requests;
    expect(first?.path).toBe("/v1/messages");
    expect(first?.headers["anthropic-version"]).toBeTruthy();
    // Caching is on by default (contracts §13): breakpoints on the system prompt, the last
    // tool and the last user turn.
    expect(first?.body).toEqual({
      model: "claude-test",
      max_tokens: 4096,
      stream: true,
      system: [{ type: "text", text: "You are terse.", cache_control: { type: "ephemeral" } }],
      tools: [
        {
          name: "write_file",
          description: "Write a file",
          input_schema: { type: "object", properties: { path: { type: "string" } }, required: ["path"] },
          cache_control: { type: "ephemeral" },
        },
      ],
      messages: [
        { role: "user", content: [{ type: "text", text: "hi", cache_control: { type: "ephemeral" } }] },
      ],
    });
    expect(second?.body.max_tokens).toBe(1000);
    expect(second?.body).not.toHaveProperty("tools");
    expect(second?.body).not.toHaveProperty("system");
    expect(second?.body).not.toHaveProperty("temperature");
  });

  it("sends no system prompt that is only whitespace (the API refuses it: 'system: text content blocks must contain non-whitespace text')", () => {
    const request = (system: string): ModelRequest => ({
      sessionId: "s",
      system,
      history: [{ role: "user", content: "hi" }],
      tools: [],
      signal: new AbortController().signal,
    });
    for (const cache of [true, false]) {
      const config = { provider: "anthropic" as const, model: "claude-test", cache };
      for (const blank of [" ", "\n\n", "\t "])
        expect(buildAnthropicRequest(config, request(blank))).not.toHaveProperty("system");
      // A prompt with text is sent as it is, its whitespace included.
      const body = buildAnthropicRequest(config, request(" Be brief.\n"));
      expect(body.system).toEqual(
        cache
          ? [{ type: "text", text: " Be brief.\n", cache_control: { type: "ephemeral" } }]
          : " Be brief.\n",
      );
    }
  });

  it("leaves out a cut step whose text is only whitespace (the API refuses a whitespace-only text block)", () => {
    // A stream fault right after the model's leading newlines: retry_response, then the answer.
    const history: Message[] = [
      { role: "user", content: "What is the answer?" },
      { role: "assistant", content: "\n\n", stopReason: "interrupted" },
      { role: "internal", content: RETRY_RESPONSE_TEXT },
      { role: "assistant", content: " ", stopReason: "max_output" },
      { role: "internal", content: CONTINUE_RESPONSE_TEXT },
    ];
    expect(toAnthropicMessages(history)).toEqual([
      {
        role: "user",
        content: [
          { type: "text", text: "What is the answer?" },
          { type: "text", text: RETRY_RESPONSE_TEXT },
          { type: "text", text: CONTINUE_RESPONSE_TEXT },
        ],
      },
    ]);
    // Whitespace around real text is kept as it was.
    const kept: Message[] = [
      { role: "user", content: "Go" },
      { role: "assistant", content: "\n\nPart one", stopReason: "max_output" },
      { role: "internal", content: CONTINUE_RESPONSE_TEXT },
    ];
    expect(toAnthropicMessages(kept)[1]).toEqual({
      role: "assistant",
      content: [{ type: "text", text: "\n\nPart one" }],
    });
  });

  it("leaves out whitespace-only user texts and replayed text blocks, which the API refuses, but not a last turn's only text", () => {
    const target = {
      provider: "anthropic" as const,
      api: "messages" as const,
      target: "https://api.anthropic.com",
    };
    const history: Message[] = [
      { role: "user", content: "Start" },
      // Answered by another provider (the API refuses nothing there), then Anthropic takes over.
      { role: "assistant", content: "Started.", stopReason: "end_turn" },
      { role: "user", content: " " },
      { role: "assistant", content: "Still here.", stopReason: "end_turn" },
      { role: "user", content: "\n" },
      { role: "internal", content: "Go on." },
      {
        role: "assistant",
        content: "",
        stopReason: "tool_use",
        toolCalls: [{ id: "toolu_1", name: "read_file", arguments: { path: "a" } }],
        providerState: {
          ...target,
          content: [
            { type: "text", text: "\n\n" },
            { type: "tool_use", id: "toolu_1", name: "read_file", input: { path: "a" } },
          ],
        },
      },
      { role: "tool", toolCallId: "toolu_1", name: "read_file", content: "x", success: true },
      { role: "user", content: "\t" },
    ];
    expect(toAnthropicMessages(history, target)).toEqual([
      { role: "user", content: [{ type: "text", text: "Start" }] },
      {
        role: "assistant",
        content: [
          { type: "text", text: "Started." },
          { type: "text", text: "Still here." },
        ],
      },
      { role: "user", content: [{ type: "text", text: "Go on." }] },
      {
        role: "assistant",
        content: [{ type: "tool_use", id: "toolu_1", name: "read_file", input: { path: "a" } }],
      },
      // The last turn has a result: its whitespace text goes.
      { role: "user", content: [{ type: "tool_result", tool_use_id: "toolu_1", content: "x" }] },
    ]);
    // A last turn of whitespace only is sent as it is: the provider's 400 names it.
    expect(toAnthropicMessages([{ role: "user", content: " " }])).toEqual([
      { role: "user", content: [{ type: "text", text: " " }] },
    ]);
  });

  it("a history holding whitespace-only texts goes through the API's check; a last turn of only whitespace is its 400", async () => {
    const history: Message[] = [
      { role: "user", content: "Start" },
      { role: "assistant", content: "Started.", stopReason: "end_turn" },
      { role: "user", content: " \n" },
      { role: "assistant", content: "Still here.", stopReason: "end_turn" },
      { role: "user", content: "Go on." },
    ];
    fake.script({ blocks: [{ type: "text", text: "Going." }] });
    const ok = await run(model(), request(history));
    expect(ok.error).toBeUndefined();
    expect(text(ok.events)).toBe("Going.");
    fake.requests.length = 0;
    const refused = await run(model(), request([{ role: "user", content: " " }]));
    expect(refused.error).toBeInstanceOf(ProviderError);
    expect(String((refused.error as Error).message)).toContain("non-whitespace text");
  });

  it("alternates turns: merged user turns, tool results (is_error for failures), internal as text, cut steps without tool_use", async () => {
    const history: Message[] = [
      { role: "user", content: "Write a.txt and b.txt" },
      {
        role: "assistant",
        content: "On it.",
        toolCalls: [
          { id: "a", name: "write_file", arguments: { path: "a.txt", content: "a" } },
          { id: "b", name: "write_file", arguments: { path: "b.txt", content: "b" } },
        ],
        stopReason: "tool_use",
      },
      { role: "tool", toolCallId: "a", name: "write_file", content: "wrote a.txt", success: true },
      { role: "tool", toolCallId: "b", name: "write_file", content: INTERRUPTED_TOOL_TEXT, success: false },
      { role: "user", content: "And c.txt" },
      {
        role: "assistant",
        content: "Writing c",
        toolCalls: [{ id: "c", name: "write_file", arguments: { path: "c.txt" } }],
        stopReason: "interrupted",
      },
      { role: "internal", content: RETRY_RESPONSE_TEXT },
      { role: "assistant", content: "", stopReason: "context_full" },
      { role: "user", content: "Shorter, please." },
      { role: "assistant", content: "Partial answ", stopReason: "max_output" },
      { role: "internal", content: CONTINUE_RESPONSE_TEXT },
      { role: "assistant", content: "Searching… ", stopReason: "paused" },
      { role: "assistant", content: "still searching\n", stopReason: "paused" },
    ];
    fake.script({ blocks: [{ type: "text", text: "ok" }] });
    await run(model({ cache: false }), request(history));
    expect(fake.requests[0]?.body.messages).toEqual([
      { role: "user", content: [{ type: "text", text: "Write a.txt and b.txt" }] },
      {
        role: "assistant",
        content: [
          { type: "text", text: "On it." },
          { type: "tool_use", id: "a", name: "write_file", input: { path: "a.txt", content: "a" } },
          { type: "tool_use", id: "b", name: "write_file", input: { path: "b.txt", content: "b" } },
        ],
      },
      {
        role: "user",
        content: [
          { type: "tool_result", tool_use_id: "a", content: "wrote a.txt" },
          { type: "tool_result", tool_use_id: "b", content: INTERRUPTED_TOOL_TEXT, is_error: true },
          { type: "text", text: "And c.txt" },
        ],
      },
      // Interrupted: its text only, no tool_use.
      { role: "assistant", content: [{ type: "text", text: "Writing c" }] },
      // The empty context_full record is skipped, so the user-side messages merge.
      {
        role: "user",
        content: [
          { type: "text", text: RETRY_RESPONSE_TEXT },
          { type: "text", text: "Shorter, please." },
        ],
      },
      { role: "assistant", content: [{ type: "text", text: "Partial answ" }] },
      { role: "user", content: [{ type: "text", text: CONTINUE_RESPONSE_TEXT }] },
      // Consecutive paused steps are one assistant turn, replayed so the model continues;
      // the final text loses its trailing whitespace.
      {
        role: "assistant",
        content: [
          { type: "text", text: "Searching… " },
          { type: "text", text: "still searching" },
        ],
      },
    ]);
    const roles = fake.requests[0]?.body.messages.map((m) => m.role) ?? [];
    for (let i = 1; i < roles.length; i++) expect(roles[i]).not.toBe(roles[i - 1]);
  });

  it("a result whose call was not replayed becomes text, so no tool_result is orphaned", async () => {
    const history: Message[] = [
      { role: "user", content: "go" },
      {
        role: "assistant",
        content: "cut",
        toolCalls: [{ id: "x", name: "write_file", arguments: {} }],
        stopReason: "max_output",
      },
      { role: "tool", toolCallId: "x", name: "write_file", content: "boom", success: false },
    ];
    fake.script({ blocks: [{ type: "text", text: "ok" }] });
    await run(model({ cache: false }), request(history));
    expect(fake.requests[0]?.body.messages).toEqual([
      { role: "user", content: [{ type: "text", text: "go" }] },
      { role: "assistant", content: [{ type: "text", text: "cut" }] },
      {
        role: "user",
        content: [{ type: "text", text: "Result of tool write_file (call x) (failed): boom" }],
      },
    ]);
  });
});
