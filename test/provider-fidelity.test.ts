/**
 * Operations that tell the truth (issue "Operations that tell the truth"), against local HTTP
 * servers standing in for providers and a real `fleet worker` child process:
 *
 * - An error sent inside a stream (OpenAI `data: {"error": ...}`, Anthropic `event: error`)
 *   is classified like the same HTTP error: authentication, permission, invalid request are
 *   not retried; overloaded, rate limit, server errors are.
 * - Usage is `null` (unknown) when the provider reports none, never 0 tokens.
 * - Logs: each run's start and end at info with sessionId, runId, workerId, kind, outcome; a
 *   provider error at warn with status, endpoint and host, its message scrubbed of keys.
 * - `scrubSecrets` (pure).
 */
import { createServer, type IncomingMessage, type Server } from "node:http";
import type { AddressInfo } from "node:net";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import type { FleetClient } from "../src/producer/client.js";
import type { Message } from "../src/shared/messages.js";
import { REDACTED, scrubSecrets, secretValuesFromEnv } from "../src/shared/scrub-secrets.js";
import { estimateStepUsage, estimateTokens, MESSAGE_OVERHEAD } from "../src/shared/usage.js";
import { callModel, type RetryPolicy } from "../src/worker/call-model.js";
import { AnthropicModel } from "../src/worker/models/anthropic.js";
import { providerErrorFields, withProviderErrorLog } from "../src/worker/models/logged-provider.js";
import { OpenAIModel } from "../src/worker/models/openai.js";
import {
  type ModelEvent,
  type ModelProvider,
  type ModelRequest,
  ProviderError,
  streamErrorRetryable,
} from "../src/worker/models/provider.js";
import { startFakeAnthropic } from "./support/fake-anthropic.js";
import {
  createFleetEnv,
  type FleetEnv,
  readyInfo,
  type WorkerProcess,
  waitFor,
} from "./support/fleet-env.js";

const KEY = "sk-fidelity-SECRET-key-0123456789";
const POLICY: RetryPolicy = { maxAttempts: 4, baseDelayMs: 1, maxDelayMs: 1 };

type Scripted = { status?: number; headers?: Record<string, string>; body: string };

/** A server answering each request with the next scripted raw response (the last one repeats). */
async function rawServer(...script: Scripted[]) {
  const seen: { path: string; headers: IncomingMessage["headers"] }[] = [];
  const server: Server = createServer((req, res) => {
    req.resume();
    req.on("end", () => {
      seen.push({ path: req.url ?? "", headers: req.headers });
      const next = script.length > 1 ? script.shift()! : script[0]!;
      res.writeHead(next.status ?? 200, {
        "content-type": next.status && next.status !== 200 ? "application/json" : "text/event-stream",
        ...next.headers,
      });
      res.end(next.body);
    });
  });
  await new Promise<void>((resolve) => server.listen(0, "127.0.0.1", resolve));
  const { port } = server.address() as AddressInfo;
  return {
    url: `http://127.0.0.1:${port}`,
    seen,
    close: () =>
      new Promise<void>((resolve) => {
        server.closeAllConnections();
        server.close(() => resolve());
      }),
  };
}

const sse = (...events: unknown[]) => events.map((e) => `data: ${JSON.stringify(e)}\n\n`).join("");
const named = (...events: [string, unknown][]) =>
  events.map(([event, data]) => `event: ${event}\ndata: ${JSON.stringify(data)}\n\n`).join("");

function openaiChunk(delta: Record<string, unknown>, finish: string | null, usage?: unknown) {
  return {
    id: "chatcmpl-1",
    object: "chat.completion.chunk",
    created: 1,
    model: "m",
    choices: [{ index: 0, delta, finish_reason: finish }],
    ...(usage === undefined ? {} : { usage }),
  };
}

function request(history: Message[] = [{ role: "user", content: "hi" }]): ModelRequest {
  return { sessionId: "s1", history, tools: [], signal: new AbortController().signal };
}

async function collect(events: AsyncIterable<ModelEvent>): Promise<ModelEvent[]> {
  const out: ModelEvent[] = [];
  // Usage reported before the step is whole is left out here (test/cut-step-usage.test.ts).
  for await (const event of events) if (event.type !== "usage") out.push(event);
  return out;
}

async function failure(provider: ModelProvider): Promise<ProviderError> {
  const error = await collect(provider.stream(request())).then(
    () => undefined,
    (e: unknown) => e,
  );
  expect(error).toBeInstanceOf(ProviderError);
  return error as ProviderError;
}

const openai = (url: string) =>
  new OpenAIModel({ provider: "openai", model: "m", baseUrl: `${url}/v1` }, { apiKey: KEY });
const anthropic = (url: string) =>
  new AnthropicModel({ provider: "anthropic", model: "m", baseUrl: url }, { apiKey: KEY });
const noSleep = { sleep: async () => {}, policy: POLICY };

describe("scrubSecrets", () => {
  it("removes the given values, longest first, and leaves short values alone", () => {
    expect(scrubSecrets("key=abcdefgh12 and abcdefgh1234", ["abcdefgh12", "abcdefgh1234"])).toBe(
      `key=${REDACTED} and ${REDACTED}`,
    );
    expect(scrubSecrets("no-key is fine, so is 1", ["no-key", "1", "", null, undefined])).toBe(
      "no-key is fine, so is 1",
    );
  });

  it("removes anything shaped like a key: sk-…, Bearer …, api_key=…, x-api-key: …, token: …", () => {
    const text = [
      "Incorrect API key provided: sk-proj-AbC123_xyz-789.",
      "anthropic sk-ant-api03-ZZZZZZZZ",
      "masked sk-ab***********wxyz",
      "Authorization: Bearer eyJhbGciOi.JIUzI1NiJ9-x_y",
      "url?api_key=0123456789abcdef&x=1",
      'x-api-key: "team-secret-value"',
      "token=abcdef123456",
      "password: hunter2hunter2",
    ].join("\n");
    const out = scrubSecrets(text);
    for (const secret of [
      "AbC123_xyz",
      "ZZZZZZZZ",
      "wxyz",
      "eyJhbGciOi",
      "0123456789abcdef",
      "team-secret-value",
      "abcdef123456",
      "hunter2",
    ])
      expect(out).not.toContain(secret);
    expect(out).toContain("Incorrect API key provided: sk-[redacted]");
    expect(out).toContain("Bearer [redacted]");
    expect(out).toContain("&x=1");
  });

  it("leaves ordinary provider messages readable", () => {
    for (const text of [
      "prompt is too long: 250000 tokens > 200000 maximum",
      "max_tokens: 4096 is too large",
      "Overloaded",
      "HTTP 429: rate_limit_error: slow down",
    ])
      expect(scrubSecrets(text)).toBe(text);
  });

  it("secretValuesFromEnv: known key variables, names ending like a credential's, custom header values", () => {
    const values = secretValuesFromEnv({
      OPENAI_API_KEY: "sk-openai-value-1",
      ANTHROPIC_AUTH_TOKEN: "anthropic-token-2",
      TEAM_KEY: "team-key-value-3",
      GATEWAY_SECRET: "gateway-secret-4",
      ANTHROPIC_CUSTOM_HEADERS: "X-Gw: header-value-5\nX-Other: 6",
      HOME: "/home/someone-long",
      SHORT_KEY: "abc",
    });
    expect(values.sort()).toEqual(
      [
        "anthropic-token-2",
        "gateway-secret-4",
        "header-value-5",
        "sk-openai-value-1",
        "team-key-value-3",
      ].sort(),
    );
  });
});

describe("errors inside a stream are classified like the same HTTP error", () => {
  it("streamErrorRetryable: status or numeric code first, then the type or code", () => {
    const rows: [Parameters<typeof streamErrorRetryable>[0], boolean][] = [
      [{ type: "invalid_request_error", code: "invalid_api_key" }, false],
      [{ type: "authentication_error" }, false],
      [{ type: "permission_error" }, false],
      [{ type: "PermissionDeniedError" }, false],
      [{ type: "BadRequestError", code: 400 }, false],
      [{ code: 401 }, false],
      [{ code: "403" }, false],
      [{ status: 404 }, false],
      [{ type: "not_found_error" }, false],
      [{ type: "billing_error" }, false],
      [{ type: "overloaded_error" }, true],
      [{ type: "rate_limit_error" }, true],
      [{ code: "rate_limit_exceeded" }, true],
      [{ type: "server_error" }, true],
      [{ type: "api_error" }, true],
      [{ code: 429 }, true],
      [{ code: 503 }, true],
      [{ status: 408 }, true],
      [{ type: "invalid_request_error", status: 500 }, true],
      [{}, true],
      [{ type: "something_new" }, true],
    ];
    for (const [error, retryable] of rows)
      expect(streamErrorRetryable(error), JSON.stringify(error)).toBe(retryable);
  });

  const openaiCases: [string, Record<string, unknown>, boolean][] = [
    ["invalid_api_key", { type: "invalid_request_error", code: "invalid_api_key" }, false],
    ["numeric code 401 (vLLM)", { type: "AuthenticationError", code: 401 }, false],
    ["permission_denied", { type: "permission_denied", code: null }, false],
    ["server_error", { type: "server_error", code: null }, true],
    ["rate_limit_exceeded", { type: "requests", code: "rate_limit_exceeded" }, true],
    ["numeric code 503", { code: 503 }, true],
  ];
  for (const [name, error, retryable] of openaiCases) {
    it(`openai: data: {"error": ${name}} → ${retryable ? "retried" : "not retried"}`, async () => {
      const body = sse(openaiChunk({ role: "assistant", content: "" }, null), {
        error: { message: `stream says no (${KEY})`, ...error },
      });
      const server = await rawServer({ body });
      try {
        const error = await failure(openai(server.url));
        expect(error.retryable).toBe(retryable);
        expect(error.message).toMatch(/stream says no/);
        expect(error.message).not.toContain(KEY);
        const step = await callModel(openai(server.url), request(), noSleep);
        expect(step).toMatchObject({ ok: false, attempts: retryable ? POLICY.maxAttempts : 1 });
        expect(server.seen).toHaveLength(1 + (retryable ? POLICY.maxAttempts : 1));
      } finally {
        await server.close();
      }
    });
  }

  const anthropicCases: [string, boolean][] = [
    ["authentication_error", false],
    ["permission_error", false],
    ["invalid_request_error", false],
    ["not_found_error", false],
    ["billing_error", false],
    ["overloaded_error", true],
    ["rate_limit_error", true],
    ["api_error", true],
  ];
  for (const [type, retryable] of anthropicCases) {
    it(`anthropic: event: error ${type} → ${retryable ? "retried" : "not retried"}`, async () => {
      const fake = await startFakeAnthropic();
      try {
        const script = () =>
          fake.script({
            blocks: [{ type: "text", text: "never" }],
            errorAfterEvents: 1,
            errorEvent: { type, message: `stream says no (${KEY})` },
          });
        for (let i = 0; i < 1 + POLICY.maxAttempts; i++) script();
        const model = () =>
          new AnthropicModel({ provider: "anthropic", model: "m", baseUrl: fake.url }, { apiKey: KEY });
        const error = await failure(model());
        expect(error.retryable).toBe(retryable);
        expect(error.info).toMatchObject({ provider: "anthropic", type });
        expect(error.message).not.toContain(KEY);
        const step = await callModel(model(), request(), noSleep);
        expect(step).toMatchObject({ ok: false, attempts: retryable ? POLICY.maxAttempts : 1 });
        expect(fake.requests).toHaveLength(1 + (retryable ? POLICY.maxAttempts : 1));
      } finally {
        await fake.close();
      }
    });
  }
});

describe("usage is null (unknown) when the provider reports none", () => {
  it("openai: no usage chunk, or one without both counts → null; through callModel the message says null", async () => {
    const text = openaiChunk({ role: "assistant", content: "hi" }, null);
    const finish = openaiChunk({}, "stop");
    const server = await rawServer(
      { body: `${sse(text, finish)}data: [DONE]\n\n` },
      { body: `${sse(text, finish, openaiChunk({}, null, { prompt_tokens: 12 }))}data: [DONE]\n\n` },
      {
        body: `${sse(text, finish, { ...openaiChunk({}, null), choices: [], usage: { prompt_tokens: 12, completion_tokens: 3 } })}data: [DONE]\n\n`,
      },
      { body: `${sse(text, finish)}data: [DONE]\n\n` },
    );
    try {
      expect((await collect(openai(server.url).stream(request()))).at(-1)).toEqual({
        type: "done",
        stopReason: "end_turn",
        usage: null,
      });
      expect((await collect(openai(server.url).stream(request()))).at(-1)).toMatchObject({ usage: null });
      expect((await collect(openai(server.url).stream(request()))).at(-1)).toMatchObject({
        usage: { inputTokens: 12, outputTokens: 3 },
      });
      const step = await callModel(openai(server.url), request(), noSleep);
      expect(step).toMatchObject({
        ok: true,
        message: { content: "hi", stopReason: "end_turn", usage: null },
      });
      // For the budget: an estimate, never 0, never stored as the usage.
      expect(step.ok && step.estimatedUsage).toEqual(estimateStepUsage(request(), { content: "hi" }));
    } finally {
      await server.close();
    }
  });

  it("anthropic: no usage in message_start or message_delta → null; reported usage sums cache reads and writes", async () => {
    const start = (usage?: unknown) => [
      "message_start",
      {
        type: "message_start",
        message: {
          id: "msg_1",
          type: "message",
          role: "assistant",
          model: "m",
          content: [],
          ...(usage ? { usage } : {}),
        },
      },
    ];
    const rest = (usage?: unknown): [string, unknown][] => [
      [
        "content_block_start",
        { type: "content_block_start", index: 0, content_block: { type: "text", text: "" } },
      ],
      [
        "content_block_delta",
        { type: "content_block_delta", index: 0, delta: { type: "text_delta", text: "hi" } },
      ],
      ["content_block_stop", { type: "content_block_stop", index: 0 }],
      [
        "message_delta",
        { type: "message_delta", delta: { stop_reason: "end_turn" }, ...(usage ? { usage } : {}) },
      ],
      ["message_stop", { type: "message_stop" }],
    ];
    const server = await rawServer(
      { body: named(start() as [string, unknown], ...rest()) },
      { body: named(start() as [string, unknown], ...rest({ output_tokens: 9 })) },
      {
        body: named(
          start({
            input_tokens: 10,
            cache_creation_input_tokens: 5,
            cache_read_input_tokens: 100,
            output_tokens: 1,
          }) as [string, unknown],
          ...rest({ output_tokens: 9 }),
        ),
      },
    );
    try {
      expect((await collect(anthropic(server.url).stream(request()))).at(-1)).toEqual({
        type: "done",
        stopReason: "end_turn",
        usage: null,
      });
      // Output known, input never reported: still unknown, not 0 input tokens.
      expect((await collect(anthropic(server.url).stream(request()))).at(-1)).toMatchObject({ usage: null });
      expect((await collect(anthropic(server.url).stream(request()))).at(-1)).toMatchObject({
        usage: { inputTokens: 115, outputTokens: 9 },
      });
    } finally {
      await server.close();
    }
  });
});

describe("the estimate a budget counts for unknown usage", () => {
  it("one token per 3 UTF-8 bytes, rounded up, plus a per-message overhead; more than 0 for any step", () => {
    expect(estimateTokens("")).toBe(0);
    expect(estimateTokens("abcd")).toBe(2);
    expect(estimateTokens("日本")).toBe(2);
    const history: Message[] = [{ role: "user", content: "x".repeat(300) }];
    const small = estimateStepUsage({ history }, { content: "" });
    expect(small.inputTokens).toBeGreaterThanOrEqual(100 + MESSAGE_OVERHEAD);
    expect(small.outputTokens).toBe(MESSAGE_OVERHEAD);
    const big = estimateStepUsage(
      { system: "s".repeat(30), history, tools: [{ name: "t", description: "d", parameters: {} }] },
      { content: "y".repeat(30), toolCalls: [{ id: "c", name: "t", arguments: { a: 1 } }] },
    );
    expect(big.inputTokens).toBeGreaterThan(small.inputTokens + 10);
    expect(big.outputTokens).toBeGreaterThan(10 + MESSAGE_OVERHEAD);
  });

  it("callModel gives an estimate only when no usage was reported (none at all counts as unknown too)", async () => {
    const reporting: ModelProvider = {
      async *stream() {
        yield { type: "text", delta: "hi" };
        yield { type: "done", stopReason: "end_turn", usage: { inputTokens: 3, outputTokens: 1 } };
      },
    };
    const scripted: ModelProvider = {
      async *stream() {
        yield { type: "done", stopReason: "end_turn" };
      },
    };
    expect(await callModel(reporting, request(), noSleep)).not.toHaveProperty("estimatedUsage");
    // A step with no usage at all (the scripted model's) is unknown usage too: it is estimated.
    expect(await callModel(scripted, request(), noSleep)).toHaveProperty("estimatedUsage");
  });
});

describe("the provider error log line (pure)", () => {
  it("carries status, endpoint, host and the scrubbed message; a cancelled request is not logged", async () => {
    const error = new ProviderError(
      `openai: 401 bad key team-value-0123456789 and ${KEY}`,
      false,
      undefined,
      {
        provider: "openai",
        status: 401,
        endpoint: "team",
        host: "127.0.0.1:1234",
        type: "invalid_api_key",
      },
    );
    const fields = providerErrorFields(
      error,
      { sessionId: "s" },
      { runId: "r", workerId: "w" },
      {
        TEAM_KEY: "team-value-0123456789",
      },
    );
    expect(fields).toEqual({
      sessionId: "s",
      runId: "r",
      workerId: "w",
      provider: "openai",
      endpoint: "team",
      host: "127.0.0.1:1234",
      status: 401,
      type: "invalid_api_key",
      retryable: false,
      error: `openai: 401 bad key ${REDACTED} and sk-${REDACTED}`,
    });

    const lines: unknown[] = [];
    const log = { warn: (obj: unknown) => lines.push(obj) };
    const failing: ModelProvider = {
      // biome-ignore lint/correctness/useYield: fails before any event
      async *stream() {
        throw error;
      },
    };
    const controller = new AbortController();
    const wrapped = withProviderErrorLog(failing, log as never, { runId: "r" });
    await expect(collect(wrapped.stream(request()))).rejects.toBe(error);
    expect(lines).toHaveLength(1);
    controller.abort();
    await expect(collect(wrapped.stream({ ...request(), signal: controller.signal }))).rejects.toBe(error);
    expect(lines).toHaveLength(1);
  });
});

describe("log lines of a real worker process", () => {
  const TEAM_KEY = "team-SECRET-not-sk-shaped-0123456789";
  let fleet: FleetEnv;
  let client: FleetClient;
  let worker: WorkerProcess;
  let workerId: string;
  /** Declared endpoint "team" (with TEAM_KEY): answers HTTP 401 echoing the key. */
  let http401: Awaited<ReturnType<typeof rawServer>>;
  /** Declared endpoint "stream401": a 200 whose stream carries a 401-like error. */
  let stream401: Awaited<ReturnType<typeof rawServer>>;

  beforeAll(async () => {
    http401 = await rawServer({
      status: 401,
      body: JSON.stringify({
        error: {
          message: `Incorrect API key provided: ${TEAM_KEY}. Bearer ${TEAM_KEY}`,
          type: "invalid_request_error",
          code: "invalid_api_key",
        },
      }),
    });
    stream401 = await rawServer({
      body: sse(openaiChunk({ role: "assistant", content: "" }, null), {
        error: { message: `invalid key ${TEAM_KEY}`, type: "invalid_request_error", code: "invalid_api_key" },
      }),
    });
    fleet = await createFleetEnv("providerfidelity", {
      env: {
        FLEET_MODEL_ENDPOINTS: JSON.stringify({
          team: { provider: "openai", baseUrl: `${http401.url}/v1`, apiKeyEnv: "TEAM_KEY" },
          stream401: { provider: "openai", baseUrl: `${stream401.url}/v1`, apiKeyEnv: "TEAM_KEY" },
        }),
      },
    });
    ({ client } = await fleet.startApi());
    worker = await fleet.spawnWorker({ TEAM_KEY, LOG_LEVEL: "info" });
    ({ workerId } = readyInfo(worker));
  });

  afterAll(async () => {
    try {
      if (worker) expect(worker.output()).not.toContain(TEAM_KEY);
    } finally {
      await fleet?.close();
      await Promise.all([http401?.close(), stream401?.close()]);
    }
  });

  /** The worker's JSON log lines so far. */
  function lines(): Record<string, unknown>[] {
    return worker
      .output()
      .split("\n")
      .filter((line) => line.startsWith("{"))
      .map((line) => JSON.parse(line) as Record<string, unknown>);
  }

  async function run(model: Record<string, unknown>) {
    const { id } = await client.createSession({ agent: { model } as never });
    const { runId } = await client.send(id, "Hello?");
    const ended = await client.waitForRun(runId, { timeoutMs: 20_000 });
    // The run is ended in Postgres just before its last line is written (and piped to us).
    await waitFor(
      () => lines().some((l) => l.runId === runId && l.msg === "run ended"),
      5_000,
      "the run's end line",
    );
    return { sessionId: id, runId, ended };
  }

  it("each run's start and end at info, with sessionId, runId, workerId, kind and outcome", async () => {
    const { sessionId, runId, ended } = await run({ provider: "scripted", steps: [{ text: "hi" }] });
    expect(ended.endedReason).toBe("completed");
    const mine = lines().filter((l) => l.runId === runId);
    const started = mine.find((l) => l.msg === "run started");
    const endedLine = mine.find((l) => l.msg === "run ended");
    expect(started).toMatchObject({ level: 30, sessionId, runId, workerId, kind: "run" });
    expect(endedLine).toMatchObject({
      level: 30,
      sessionId,
      runId,
      workerId,
      kind: "run",
      outcome: "completed",
    });
    expect(endedLine!.durationMs).toEqual(expect.any(Number));
  });

  it("a provider 401 is logged at warn with status, endpoint and host, the key scrubbed", async () => {
    const { sessionId, runId, ended } = await run({ provider: "openai", model: "m", endpoint: "team" });
    expect(ended.endedReason).toBe("provider_error");
    expect(ended.error).toMatch(/401 Incorrect API key provided/);
    expect(ended.error).not.toContain(TEAM_KEY);
    const warn = lines().find((l) => l.runId === runId && l.msg === "provider error");
    expect(warn).toMatchObject({
      level: 40,
      sessionId,
      runId,
      workerId,
      provider: "openai",
      endpoint: "team",
      host: new URL(http401.url).host,
      status: 401,
      type: "invalid_request_error",
      retryable: false,
    });
    expect(warn!.error).toMatch(/Incorrect API key provided: \[redacted\]/);
    expect(JSON.stringify(warn)).not.toContain(TEAM_KEY);
    expect(lines().find((l) => l.runId === runId && l.msg === "run ended")).toMatchObject({
      outcome: "provider_error",
    });
    expect(http401.seen).toHaveLength(1);
    // The key did go to the endpoint it was declared for.
    expect(http401.seen[0]!.headers.authorization).toBe(`Bearer ${TEAM_KEY}`);
  });

  it("a 401 inside the stream ends the run after one request, logged at warn without a status", async () => {
    const { runId, ended } = await run({ provider: "openai", model: "m", endpoint: "stream401" });
    expect(ended.endedReason).toBe("provider_error");
    expect(stream401.seen).toHaveLength(1);
    const warns = lines().filter((l) => l.runId === runId && l.msg === "provider error");
    expect(warns).toHaveLength(1);
    expect(warns[0]).toMatchObject({ level: 40, endpoint: "stream401", status: null, retryable: false });
    expect(JSON.stringify(warns[0])).not.toContain(TEAM_KEY);
  });
});
