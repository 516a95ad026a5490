/**
 * The OpenAI-compatible provider against a local HTTP server speaking the real
 * chat-completions SSE protocol (test/support/fake-openai.ts): no SDK mocks.
 */
import { afterEach, beforeEach, describe, expect, it } from "vitest";
import type { Message } from "../src/shared/messages.js";
import {
  CONTINUE_RESPONSE_TEXT,
  INTERRUPTED_TOOL_TEXT,
  RETRY_RESPONSE_TEXT,
} from "../src/shared/resume-plan.js";
import { callModel } from "../src/worker/call-model.js";
import {
  MISSING_OPENAI_KEY,
  OpenAIModel,
  type OpenAIModelConfig,
  parseToolArguments,
} from "../src/worker/models/openai.js";
import {
  type ModelEvent,
  type ModelRequest,
  ProviderError,
  retryAfterMs,
  type ToolSpec,
} from "../src/worker/models/provider.js";
import { type FakeOpenAI, type FakeResponse, startFakeOpenAI } from "./support/fake-openai.js";

const KEY = "sk-test-SECRET-key-0123456789";

const WRITE_FILE: ToolSpec = {
  name: "write_file",
  description: "Writes a file",
  parameters: {
    type: "object",
    properties: { path: { type: "string" }, content: { type: "string" } },
    required: ["path", "content"],
  },
};

let fake: FakeOpenAI;
beforeEach(async () => {
  fake = await startFakeOpenAI();
});
afterEach(async () => fake.close());

function model(config: Partial<OpenAIModelConfig> = {}, apiKey: string | undefined = KEY): OpenAIModel {
  return new OpenAIModel({ provider: "openai", model: "gpt-test", baseUrl: fake.url, ...config }, { apiKey });
}

function request(
  history: Message[] = [{ role: "user", content: "hi" }],
  extra: Partial<ModelRequest> = {},
): ModelRequest {
  return {
    sessionId: "s1",
    history,
    tools: [],
    signal: new AbortController().signal,
    ...extra,
  };
}

async function collect(events: AsyncIterable<ModelEvent>): Promise<ModelEvent[]> {
  const out: ModelEvent[] = [];
  // Usage reported before the step is whole is left out here (test/cut-step-usage.test.ts).
  for await (const event of events) if (event.type !== "usage") out.push(event);
  return out;
}

async function failure(events: AsyncIterable<ModelEvent>): Promise<ProviderError> {
  const error = await collect(events).then(
    () => undefined,
    (e: unknown) => e,
  );
  expect(error).toBeInstanceOf(ProviderError);
  return error as ProviderError;
}

function recordingSleep() {
  const slept: number[] = [];
  return {
    slept,
    sleep: async (ms: number) => {
      slept.push(ms);
    },
  };
}

const textOf = (events: ModelEvent[]) => events.map((e) => (e.type === "text" ? e.delta : "")).join("");

describe("stop reasons (resume-semantics §6)", () => {
  const rows: [string, string][] = [
    ["stop", "end_turn"],
    ["length", "max_output"],
    ["content_filter", "refusal"],
    ["function_call", "tool_use"],
    ["eos_token_weird", "eos_token_weird"],
  ];
  for (const [finishReason, stopReason] of rows) {
    it(`finish_reason ${finishReason} → ${stopReason}`, async () => {
      fake.enqueue({ text: ["Hel", "lo"], finishReason });
      const events = await collect(model().stream(request()));
      expect(events).toEqual([
        { type: "text", delta: "Hel" },
        { type: "text", delta: "lo" },
        { type: "done", stopReason, usage: { inputTokens: 11, outputTokens: 7 } },
      ]);
    });
  }

  it("tool_calls → tool_use with the calls assembled from fragments across chunks, ids kept", async () => {
    fake.enqueue({
      text: ["I'll write ", "both."],
      toolCalls: [
        { id: "call_a1", name: "write_file", arguments: '{"path":"a.txt","content":"alpha"}', fragments: 4 },
        { id: "call_b2", name: "write_file", arguments: '{"path":"b.txt","content":"beta"}', fragments: 5 },
      ],
      usage: { prompt_tokens: 120, completion_tokens: 42 },
    });
    const all = await collect(model().stream(request(undefined, { tools: [WRITE_FILE] })));
    // The fragments' characters arrive as `progress` meanwhile (names and arguments).
    const progress = all.map((e) => (e.type === "progress" ? e.chars : 0)).reduce((a, b) => a + b, 0);
    expect(progress).toBe(2 * "write_file".length + 34 + 33);
    const events = all.filter((e) => e.type !== "progress");
    expect(events).toEqual([
      { type: "text", delta: "I'll write " },
      { type: "text", delta: "both." },
      {
        type: "tool_call",
        call: { id: "call_a1", name: "write_file", arguments: { path: "a.txt", content: "alpha" } },
      },
      {
        type: "tool_call",
        call: { id: "call_b2", name: "write_file", arguments: { path: "b.txt", content: "beta" } },
      },
      { type: "done", stopReason: "tool_use", usage: { inputTokens: 120, outputTokens: 42 } },
    ]);
  });

  it("tool calls with finish_reason stop (some servers) → tool_use", async () => {
    fake.enqueue({
      toolCalls: [{ id: "c1", name: "write_file", arguments: '{"path":"x","content":"y"}' }],
      finishReason: "stop",
    });
    const events = await collect(model().stream(request()));
    expect(events.at(-1)).toMatchObject({ type: "done", stopReason: "tool_use" });
    expect(events.filter((e) => e.type === "tool_call")).toHaveLength(1);
  });

  it("unparsable arguments are kept under _raw; empty arguments are {}; a missing id is generated", async () => {
    fake.enqueue({
      toolCalls: [
        { id: "c1", name: "write_file", arguments: '{"path": "x", "cont' },
        { name: "sleep", arguments: "" },
      ],
    });
    const events = await collect(model().stream(request()));
    const calls = events.flatMap((e) => (e.type === "tool_call" ? [e.call] : []));
    expect(calls[0]).toEqual({ id: "c1", name: "write_file", arguments: { _raw: '{"path": "x", "cont' } });
    expect(calls[1]).toMatchObject({ name: "sleep", arguments: {} });
    expect(calls[1]!.id).toMatch(/\S/);
    expect(parseToolArguments("[1,2]")).toEqual({ _raw: "[1,2]" });
    expect(parseToolArguments('{"a":1}')).toEqual({ a: 1 });
  });

  it("no usage chunk → done with usage null (unknown, not 0 tokens)", async () => {
    fake.enqueue({ text: ["ok"], usage: null });
    const events = await collect(model().stream(request()));
    expect(events.at(-1)).toEqual({ type: "done", stopReason: "end_turn", usage: null });
  });
});

describe("a stream without its terminal [DONE] (resume-semantics §6: interrupted)", () => {
  it("a break after the finish chunk, before usage and [DONE], ends without done", async () => {
    fake.enqueue({ text: ["whole"], cutAfterFinish: true });
    const events = await collect(model().stream(request()));
    expect(events).toEqual([{ type: "text", delta: "whole" }]);
  });

  it("a clean end after the finish and usage chunks but without [DONE] ends without done", async () => {
    fake.enqueue({ text: ["almost ", "whole"], omitDone: true });
    const events = await collect(model().stream(request()));
    expect(events).toEqual([
      { type: "text", delta: "almost " },
      { type: "text", delta: "whole" },
    ]);
  });

  it("through callModel: interrupted with the partial text kept, the provider called once", async () => {
    fake.enqueue({ text: ["The answer ", "is 42"], cutAfterFinish: true }, { text: ["must not be used"] });
    const { slept, sleep } = recordingSleep();
    const step = await callModel(model(), request(), { sleep });
    expect(step).toEqual({
      ok: true,
      attempts: 1,
      message: { role: "assistant", content: "The answer is 42", stopReason: "interrupted" },
      // Billed though cut short: the budget counts an estimate (call-model.ts).
      estimatedUsage: { inputTokens: expect.any(Number), outputTokens: expect.any(Number) },
    });
    expect(fake.requests).toHaveLength(1);
    expect(slept).toEqual([]);
  });

  it("tool calls only, cut after the finish chunk: nothing reached the caller, so it is retried", async () => {
    const calls = { toolCalls: [{ id: "c1", name: "write_file", arguments: '{"path":"a"}' }] };
    fake.enqueue({ ...calls, cutAfterFinish: true });
    const error = await failure(model().stream(request()));
    expect(error.retryable).toBe(true);

    fake.enqueue({ ...calls, omitDone: true }, calls);
    const { sleep } = recordingSleep();
    const step = await callModel(model(), request(), { sleep, random: () => 0.5 });
    expect(step).toMatchObject({
      ok: true,
      attempts: 2,
      message: {
        stopReason: "tool_use",
        toolCalls: [{ id: "c1", name: "write_file", arguments: { path: "a" } }],
      },
    });
  });

  it("a whole response (finish chunk, usage, [DONE]) still completes", async () => {
    fake.enqueue({ text: ["whole"] });
    const events = await collect(model().stream(request()));
    expect(events).toEqual([
      { type: "text", delta: "whole" },
      { type: "done", stopReason: "end_turn", usage: { inputTokens: 11, outputTokens: 7 } },
    ]);
  });
});

describe("a stream cut mid-text", () => {
  const cut: FakeResponse = { text: ["The answer ", "is forty", "-two, because"], cutAfter: 2 };

  it("yields the partial text and ends without done", async () => {
    fake.enqueue(cut);
    const events = await collect(model().stream(request()));
    expect(events).toEqual([
      { type: "text", delta: "The answer " },
      { type: "text", delta: "is forty" },
    ]);
  });

  it("a clean end of the body without a finish chunk also ends without done", async () => {
    fake.enqueue({ text: ["half"], finishReason: null, usage: null, omitDone: true });
    const events = await collect(model().stream(request()));
    expect(events).toEqual([{ type: "text", delta: "half" }]);
  });

  it("through callModel: an interrupted message with the partial text, the provider called once", async () => {
    fake.enqueue(cut, { text: ["must not be used"] });
    const { slept, sleep } = recordingSleep();
    const step = await callModel(model(), request(), { sleep });
    expect(step).toEqual({
      ok: true,
      attempts: 1,
      message: { role: "assistant", content: "The answer is forty", stopReason: "interrupted" },
      // Billed though cut short: the budget counts an estimate (call-model.ts).
      estimatedUsage: { inputTokens: expect.any(Number), outputTokens: expect.any(Number) },
    });
    expect(fake.requests).toHaveLength(1);
    expect(slept).toEqual([]);
  });

  it("a cut before any text is a retryable failure, so callModel retries it", async () => {
    fake.enqueue({ text: ["lost"], cutAfter: 0 });
    const first = await failure(model().stream(request()));
    expect(first.retryable).toBe(true);
    fake.enqueue({ text: ["lost"], cutAfter: 0 }, { text: ["Hello"] });
    const { slept, sleep } = recordingSleep();
    const step = await callModel(model(), request(), { sleep, random: () => 0.5 });
    expect(step).toMatchObject({
      ok: true,
      attempts: 2,
      message: { content: "Hello", stopReason: "end_turn" },
    });
    expect(slept).toHaveLength(1);
  });

  it("an error event inside the stream before output is retryable", async () => {
    fake.enqueue({ streamError: { message: "upstream overloaded" } });
    const error = await failure(model().stream(request()));
    expect(error.retryable).toBe(true);
    expect(error.message).toMatch(/upstream overloaded/);
  });

  it("an abort mid-stream ends the step as cancelled", async () => {
    fake.enqueue({ text: ["a", "b", "c", "d"], chunkDelayMs: 200 });
    const controller = new AbortController();
    setTimeout(() => controller.abort(), 300);
    const { sleep } = recordingSleep();
    const step = await callModel(model(), request(undefined, { signal: controller.signal }), { sleep });
    expect(step).toMatchObject({ ok: false, aborted: true });
  });
});

describe("errors", () => {
  it("429 with retry-after → callModel waits retry-after, retries once, no duplicated text", async () => {
    fake.enqueue(
      {
        status: 429,
        headers: { "retry-after": "2" },
        errorMessage: "Rate limit reached",
        errorCode: "rate_limit_exceeded",
      },
      { text: ["Hello ", "there"] },
    );
    const direct = new OpenAIModel(
      { provider: "openai", model: "gpt-test", baseUrl: fake.url },
      { apiKey: KEY },
    );
    const { slept, sleep } = recordingSleep();
    const step = await callModel(direct, request(), { sleep });
    expect(step).toEqual({
      ok: true,
      attempts: 2,
      message: {
        role: "assistant",
        content: "Hello there",
        stopReason: "end_turn",
        usage: { inputTokens: 11, outputTokens: 7 },
      },
    });
    expect(slept).toEqual([2000]);
    expect(fake.requests).toHaveLength(2);
  });

  it("429 → retryable with retryAfterMs; retry-after-ms wins over retry-after", async () => {
    fake.enqueue({ status: 429, headers: { "retry-after-ms": "1500", "retry-after": "9" } });
    const error = await failure(model().stream(request()));
    expect(error).toMatchObject({ retryable: true, retryAfterMs: 1500 });
    expect(retryAfterMs(new Headers({ "retry-after": "3" }))).toBe(3000);
    expect(
      retryAfterMs(new Headers({ "retry-after": new Date(Date.now() + 5000).toUTCString() })),
    ).toBeGreaterThan(3000);
    expect(retryAfterMs(new Headers())).toBeUndefined();
  });

  it("500 and 503 → retryable, with the server's message", async () => {
    fake.enqueue({ status: 500, errorMessage: "The server had an error", errorType: "server_error" });
    const error = await failure(model().stream(request()));
    expect(error.retryable).toBe(true);
    expect(error.message).toMatch(/500 The server had an error/);
    expect(error.stack ?? "").not.toMatch(/node_modules\/openai/);

    fake.enqueue({ status: 503, headers: { "retry-after": "1" } });
    expect(await failure(model().stream(request()))).toMatchObject({ retryable: true, retryAfterMs: 1000 });
  });

  it("a connection error → retryable", async () => {
    const closed = await startFakeOpenAI();
    const url = closed.url;
    await closed.close();
    const error = await failure(
      new OpenAIModel({ provider: "openai", model: "m", baseUrl: url }, { apiKey: KEY }).stream(request()),
    );
    expect(error.retryable).toBe(true);
    expect(error.message).toMatch(/connection/i);
  });

  const contextErrors: [string, FakeResponse][] = [
    [
      "OpenAI context_length_exceeded",
      {
        status: 400,
        errorCode: "context_length_exceeded",
        errorMessage:
          "This model's maximum context length is 128000 tokens. However, your messages resulted in 130000 tokens.",
      },
    ],
    [
      "vLLM message only",
      {
        status: 400,
        errorType: "BadRequestError",
        errorMessage:
          "This model's maximum context length is 4096 tokens. However, you requested 5000 tokens (4000 in the messages, 1000 in the completion).",
      },
    ],
    [
      "llama.cpp exceed_context_size_error",
      {
        status: 400,
        errorType: "exceed_context_size_error",
        errorMessage: "the request exceeds the available context size, try increasing it",
      },
    ],
  ];
  for (const [name, response] of contextErrors) {
    it(`400 context length (${name}) → done context_full, no text`, async () => {
      fake.enqueue(response);
      expect(await collect(model().stream(request()))).toEqual([
        { type: "done", stopReason: "context_full" },
      ]);
    });
  }

  it("through callModel a context-length 400 becomes an assistant message with context_full", async () => {
    fake.enqueue(contextErrors[0]![1]);
    const { sleep } = recordingSleep();
    const step = await callModel(model(), request(), { sleep });
    expect(step).toEqual({
      ok: true,
      attempts: 1,
      // No usage reported: the budget's estimate (usage.ts) comes along.
      estimatedUsage: expect.any(Object),
      message: { role: "assistant", content: "", stopReason: "context_full" },
    });
  });

  it("401 → non-retryable with the server's message, the key scrubbed", async () => {
    fake.enqueue({
      status: 401,
      errorType: "invalid_request_error",
      errorCode: "invalid_api_key",
      errorMessage: `Incorrect API key provided: ${KEY}. You can find your API key at https://platform.openai.com.`,
    });
    const error = await failure(model().stream(request()));
    expect(error.retryable).toBe(false);
    expect(error.retryAfterMs).toBeUndefined();
    expect(error.message).toMatch(/401 Incorrect API key provided/);
    expect(error.message).not.toContain(KEY);
    expect(error.message).not.toContain("SECRET");
    expect(fake.requests[0]!.headers.authorization).toBe(`Bearer ${KEY}`);
  });

  it("other 4xx → non-retryable; a plain 400 is not mistaken for context_full", async () => {
    fake.enqueue({
      status: 400,
      errorMessage: "Invalid value for 'temperature'",
      errorCode: "invalid_value",
    });
    const error = await failure(model().stream(request()));
    expect(error).toMatchObject({ retryable: false });
    expect(error.message).toMatch(/temperature/);
    fake.enqueue({ status: 404, errorMessage: "The model `gpt-nope` does not exist" });
    expect(await failure(model().stream(request()))).toMatchObject({ retryable: false });
  });

  it("no API key and no baseUrl → non-retryable, nothing sent", async () => {
    const error = await failure(new OpenAIModel({ provider: "openai", model: "m" }, {}).stream(request()));
    expect(error).toMatchObject({ retryable: false, message: MISSING_OPENAI_KEY });
  });

  it("no API key with a baseUrl → non-retryable, nothing sent (a key is wanted unless the route says keyless)", async () => {
    const error = await failure(
      new OpenAIModel({ provider: "openai", model: "gpt-test", baseUrl: fake.url }, {}).stream(request()),
    );
    expect(error).toMatchObject({ retryable: false, message: MISSING_OPENAI_KEY });
    expect(fake.requests).toHaveLength(0);
  });

  it("a keyless route (a raw baseUrl) → a placeholder key is sent", async () => {
    fake.enqueue({ text: ["local"] });
    const keyless = new OpenAIModel(
      { provider: "openai", model: "gpt-test", baseUrl: fake.url },
      { keyless: true },
    );
    const sentinel = "sk-ENV-SENTINEL-0123456789";
    const saved = { ...process.env };
    // What the SDK would read by itself if it were let: none of it may reach the server.
    Object.assign(process.env, {
      OPENAI_API_KEY: sentinel,
      OPENAI_ADMIN_KEY: sentinel,
      OPENAI_ORG_ID: sentinel,
      OPENAI_PROJECT_ID: sentinel,
      OPENAI_BASE_URL: "http://127.0.0.1:9/v1",
    });
    try {
      const events = await collect(keyless.stream(request()));
      expect(textOf(events)).toBe("local");
    } finally {
      for (const name of [
        "OPENAI_API_KEY",
        "OPENAI_ADMIN_KEY",
        "OPENAI_ORG_ID",
        "OPENAI_PROJECT_ID",
        "OPENAI_BASE_URL",
      ]) {
        if (saved[name] === undefined) delete process.env[name];
        else process.env[name] = saved[name];
      }
    }
    expect(fake.requests[0]!.headers.authorization).toBe("Bearer no-key");
    expect(JSON.stringify(fake.requests[0]!.headers)).not.toContain(sentinel);
  });

  it("a missing key of a declared endpoint → that message, non-retryable, nothing sent", async () => {
    const missing = 'TEAM_KEY (the key of endpoint "team") is not set in the worker\'s environment';
    const named = await failure(
      new OpenAIModel(
        { provider: "openai", model: "gpt-test", baseUrl: fake.url },
        { missingKey: missing },
      ).stream(request()),
    );
    expect(named).toMatchObject({ retryable: false, message: missing });
    expect(fake.requests).toHaveLength(0);
  });

  it("no error message carries the key", async () => {
    const messages: string[] = [];
    for (const response of [
      { status: 401, errorMessage: `bad key ${KEY}` },
      { status: 403, errorMessage: `forbidden for ${KEY}` },
      { status: 500, errorMessage: `oops ${KEY}` },
      { status: 429, errorMessage: `slow down ${KEY}` },
      { streamError: { message: `in-stream ${KEY}` } },
    ] satisfies FakeResponse[]) {
      fake.enqueue(response);
      messages.push((await failure(model().stream(request()))).message);
    }
    for (const message of messages) expect(message).not.toContain(KEY);
    expect(messages.join("\n")).not.toMatch(/SECRET/);
  });
});

describe("request conversion", () => {
  it("sends system, user, internal as user text, tool calls, tool results with Error: for failures", async () => {
    const history: Message[] = [
      { role: "user", content: "Write a.txt and b.txt" },
      {
        role: "assistant",
        content: "Writing.",
        toolCalls: [
          { id: "a", name: "write_file", arguments: { path: "a.txt", content: "A" } },
          { id: "b", name: "write_file", arguments: { path: "b.txt", content: "B" } },
        ],
        stopReason: "tool_use",
      },
      { role: "tool", toolCallId: "a", name: "write_file", content: "wrote a.txt", success: true },
      { role: "tool", toolCallId: "b", name: "write_file", content: INTERRUPTED_TOOL_TEXT, success: false },
      {
        role: "assistant",
        content: "Let me che",
        toolCalls: [{ id: "half", name: "write_file", arguments: { path: "c" } }],
        stopReason: "interrupted",
      },
      { role: "internal", content: RETRY_RESPONSE_TEXT },
      { role: "assistant", content: "Part one", stopReason: "max_output" },
      { role: "user", content: "go on" },
    ];
    fake.enqueue({ text: ["ok"] });
    await collect(
      model({ maxTokens: 256, temperature: 0.2 }).stream(
        request(history, { system: "You are terse.", tools: [WRITE_FILE] }),
      ),
    );
    expect(fake.requests).toHaveLength(1);
    const { body, path, headers } = fake.requests[0]!;
    expect(path).toBe("/v1/chat/completions");
    expect(headers.authorization).toBe(`Bearer ${KEY}`);
    expect(body).toMatchObject({
      model: "gpt-test",
      stream: true,
      stream_options: { include_usage: true },
      max_tokens: 256,
      temperature: 0.2,
      tools: [
        {
          type: "function",
          function: { name: "write_file", description: "Writes a file", parameters: WRITE_FILE.parameters },
        },
      ],
    });
    expect(body.max_completion_tokens).toBeUndefined();
    expect(body.messages).toEqual([
      { role: "system", content: "You are terse." },
      { role: "user", content: "Write a.txt and b.txt" },
      {
        role: "assistant",
        content: "Writing.",
        tool_calls: [
          {
            id: "a",
            type: "function",
            function: { name: "write_file", arguments: '{"path":"a.txt","content":"A"}' },
          },
          {
            id: "b",
            type: "function",
            function: { name: "write_file", arguments: '{"path":"b.txt","content":"B"}' },
          },
        ],
      },
      { role: "tool", tool_call_id: "a", content: "wrote a.txt" },
      { role: "tool", tool_call_id: "b", content: `Error: ${INTERRUPTED_TOOL_TEXT}` },
      // The interrupted response is replayed as text only: its half-formed call never ran.
      { role: "assistant", content: "Let me che" },
      { role: "user", content: RETRY_RESPONSE_TEXT },
      { role: "assistant", content: "Part one" },
      { role: "user", content: "go on" },
    ]);
  });

  it("leaves out a step with no text and no replayed calls (vLLM and Mistral refuse an empty assistant message)", async () => {
    // A reasoning model that spent its output limit before any text: finish_reason length
    // with empty content, then continue_response; and new input after a context_full record.
    const history: Message[] = [
      { role: "user", content: "Write a lot" },
      {
        role: "assistant",
        content: "",
        toolCalls: [{ id: "cut", name: "write_file", arguments: { _raw: '{"path":"a' } }],
        stopReason: "max_output",
      },
      { role: "internal", content: CONTINUE_RESPONSE_TEXT },
      { role: "assistant", content: "", stopReason: "context_full" },
      { role: "user", content: "Shorter, please" },
    ];
    fake.enqueue({ text: ["ok"] });
    await collect(model().stream(request(history)));
    expect(fake.requests[0]!.body.messages).toEqual([
      { role: "user", content: "Write a lot" },
      { role: "user", content: CONTINUE_RESPONSE_TEXT },
      { role: "user", content: "Shorter, please" },
    ]);
  });

  it("no tools → no tools field; no maxTokens/temperature → neither field", async () => {
    fake.enqueue({ text: ["ok"] });
    await collect(model().stream(request()));
    const { body } = fake.requests[0]!;
    expect(body.tools).toBeUndefined();
    expect(body.max_tokens).toBeUndefined();
    expect(body.max_completion_tokens).toBeUndefined();
    expect(body.temperature).toBeUndefined();
    expect(body.messages).toEqual([{ role: "user", content: "hi" }]);
  });
});
