/**
 * The OpenAI-compatible provider end to end: the in-process API, a real `fleet worker`
 * child process with OPENAI_API_KEY in its environment, and a local fake server speaking
 * the chat-completions SSE protocol (test/support/fake-openai.ts). The fake servers listen on
 * random ports of 127.0.0.1, named as raw `baseUrl`s under FLEET_ALLOWED_BASE_URLS: they get
 * no key (contracts §11; test/model-endpoints.test.ts covers declared endpoints).
 */
import { readFile } from "node:fs/promises";
import { join } from "node:path";
import { afterAll, afterEach, beforeAll, describe, expect, it } from "vitest";
import { FleetApiError, type FleetClient } from "../src/producer/client.js";
import { CONTINUE_RESPONSE_TEXT, RETRY_RESPONSE_TEXT } from "../src/shared/resume-plan.js";
import { type FakeOpenAI, startFakeOpenAI } from "./support/fake-openai.js";
import { createFleetEnv, type FleetEnv, seqsOf, waitFor } from "./support/fleet-env.js";

const KEY = "test-key";

describe("openai provider through the API and a worker process", () => {
  let fleet: FleetEnv;
  let client: FleetClient;
  const fakes: FakeOpenAI[] = [];

  beforeAll(async () => {
    fleet = await createFleetEnv("openaiworker", { env: { FLEET_ALLOWED_BASE_URLS: "http://127.0.0.1" } });
    ({ client } = await fleet.startApi());
    await fleet.spawnWorker({ OPENAI_API_KEY: KEY });
  });
  afterEach(async () => {
    for (const fake of fakes.splice(0)) await fake.close();
  });
  afterAll(async () => fleet?.close());

  async function fakeServer(): Promise<FakeOpenAI> {
    const fake = await startFakeOpenAI();
    fakes.push(fake);
    return fake;
  }

  async function session(fake: FakeOpenAI, extra: { tools?: string[]; system?: string } = {}) {
    return client.createSession({
      agent: {
        model: { provider: "openai", model: "gpt-test", baseUrl: fake.url },
        tools: extra.tools ?? [],
        ...(extra.system ? { system: extra.system } : {}),
      },
    });
  }

  it("(a) a tool call then an answer → completed; the 2nd request carries the tool result", async () => {
    const fake = await fakeServer();
    fake.enqueue(
      {
        text: ["Writing it."],
        toolCalls: [
          {
            id: "call_w1",
            name: "write_file",
            arguments: '{"path":"notes.txt","content":"hi"}',
            fragments: 4,
          },
        ],
      },
      { text: ["Done: ", "wrote notes.txt"] },
    );
    const { id } = await session(fake, { tools: ["write_file"], system: "Be brief." });
    const { runId } = await client.send(id, "Write notes.txt");
    const run = await client.waitForRun(runId, { timeoutMs: 20_000 });
    expect(run.endedReason).toBe("completed");

    const stored = await client.getSession(id);
    expect(stored.messages.map((m) => m.role)).toEqual(["user", "assistant", "tool", "assistant"]);
    expect(seqsOf(stored.messages)).toEqual([1, 2, 3, 4]);
    expect(stored.messages[1]).toMatchObject({
      role: "assistant",
      content: "Writing it.",
      stopReason: "tool_use",
      toolCalls: [{ id: "call_w1", name: "write_file", arguments: { path: "notes.txt", content: "hi" } }],
      usage: { inputTokens: 11, outputTokens: 7 },
    });
    expect(stored.messages[2]).toMatchObject({ role: "tool", toolCallId: "call_w1", success: true });
    expect(stored.messages[3]).toMatchObject({ content: "Done: wrote notes.txt", stopReason: "end_turn" });
    expect(await readFile(join(fleet.config.toolDir, "notes.txt"), "utf8")).toBe("hi");

    expect(fake.requests).toHaveLength(2);
    // A raw baseUrl: the worker's OPENAI_API_KEY never goes there.
    expect(fake.requests[0]!.headers.authorization).toBe("Bearer no-key");
    const first = fake.requests[0]!.body;
    expect(first.model).toBe("gpt-test");
    expect(first.tools.map((t: { function: { name: string } }) => t.function.name)).toEqual(["write_file"]);
    expect(first.messages).toEqual([
      { role: "system", content: "Be brief." },
      { role: "user", content: "Write notes.txt" },
    ]);
    const second = fake.requests[1]!.body.messages;
    expect(second.at(-2)).toMatchObject({
      role: "assistant",
      tool_calls: [{ id: "call_w1", function: { name: "write_file" } }],
    });
    expect(second.at(-1)).toEqual({
      role: "tool",
      tool_call_id: "call_w1",
      content: stored.messages[2]!.content,
    });
  });

  it("(b) a stream cut mid-text → interrupted with the partial kept; resume retries the response", async () => {
    const fake = await fakeServer();
    fake.enqueue({ text: ["The answer ", "is forty", "-two."], cutAfter: 2 });
    const { id } = await session(fake);
    const { runId } = await client.send(id, "What is the answer?");
    const run = await client.waitForRun(runId, { timeoutMs: 20_000 });
    expect(run.endedReason).toBe("interrupted");
    expect(fake.requests).toHaveLength(1);

    const before = await client.getSession(id);
    expect(before.messages.at(-1)).toMatchObject({
      role: "assistant",
      content: "The answer is forty",
      stopReason: "interrupted",
    });
    expect(await client.resumePoint(id)).toMatchObject({ resumable: true, kind: "retry_response" });

    fake.enqueue({ text: ["The answer ", "is forty-two."] });
    const resumed = await client.resume(id);
    expect(resumed.kind).toBe("retry_response");
    const again = await client.waitForRun(resumed.runId, { timeoutMs: 20_000 });
    expect(again.endedReason).toBe("completed");

    expect(fake.requests).toHaveLength(2);
    expect(fake.requests[1]!.body.messages).toEqual([
      { role: "user", content: "What is the answer?" },
      { role: "assistant", content: "The answer is forty" },
      { role: "user", content: RETRY_RESPONSE_TEXT },
    ]);
    const after = await client.getSession(id);
    expect(after.messages.map((m) => m.role)).toEqual(["user", "assistant", "internal", "assistant"]);
    expect(after.messages.at(-1)).toMatchObject({
      content: "The answer is forty-two.",
      stopReason: "end_turn",
    });
    expect(after.status).toBe("completed");
  });

  it("(c) finish_reason length → max_output; resume continues the response", async () => {
    const fake = await fakeServer();
    fake.enqueue({ text: ["Once upon ", "a time"], finishReason: "length" });
    const { id } = await session(fake);
    const { runId } = await client.send(id, "Tell a story");
    const run = await client.waitForRun(runId, { timeoutMs: 20_000 });
    expect(run.endedReason).toBe("max_output");
    const before = await client.getSession(id);
    expect(before.messages.at(-1)).toMatchObject({ content: "Once upon a time", stopReason: "max_output" });

    fake.enqueue({ text: [" there was a fleet."] });
    const resumed = await client.resume(id);
    expect(resumed.kind).toBe("continue_response");
    const again = await client.waitForRun(resumed.runId, { timeoutMs: 20_000 });
    expect(again.endedReason).toBe("completed");
    expect(fake.requests[1]!.body.messages.slice(-2)).toEqual([
      { role: "assistant", content: "Once upon a time" },
      { role: "user", content: CONTINUE_RESPONSE_TEXT },
    ]);
    const after = await client.getSession(id);
    expect(after.messages.at(-1)).toMatchObject({ content: " there was a fleet.", stopReason: "end_turn" });
  });

  it("(d) a context-length 400 → context_full; resume is refused with 409 context_full", async () => {
    const fake = await fakeServer();
    fake.enqueue({
      status: 400,
      errorCode: "context_length_exceeded",
      errorMessage:
        "This model's maximum context length is 8192 tokens. However, your messages resulted in 9001 tokens.",
    });
    const { id } = await session(fake);
    const { runId } = await client.send(id, "A very long prompt");
    const run = await client.waitForRun(runId, { timeoutMs: 20_000 });
    expect(run.endedReason).toBe("context_full");
    expect(fake.requests).toHaveLength(1);
    const stored = await client.getSession(id);
    expect(stored.messages.at(-1)).toMatchObject({
      role: "assistant",
      content: "",
      stopReason: "context_full",
    });

    const refused = await client.resume(id).catch((e: unknown) => e);
    expect(refused).toBeInstanceOf(FleetApiError);
    expect((refused as FleetApiError).status).toBe(409);
    expect((refused as FleetApiError).reason).toBe("context_full");
    expect(fake.requests).toHaveLength(1);
  });

  it("(e) 429 with retry-after: 1 then success → completed with exactly one assistant message", async () => {
    const fake = await fakeServer();
    fake.enqueue(
      {
        status: 429,
        headers: { "retry-after": "1" },
        errorMessage: "Rate limit reached",
        errorType: "requests",
      },
      { text: ["Hello ", "after the wait"] },
    );
    const { id } = await session(fake);
    const started = Date.now();
    const { runId } = await client.send(id, "Hi");
    const run = await client.waitForRun(runId, { timeoutMs: 20_000 });
    expect(run.endedReason).toBe("completed");
    expect(fake.requests).toHaveLength(2);
    expect(Date.now() - started).toBeGreaterThanOrEqual(1000);

    const stored = await client.getSession(id);
    const answers = stored.messages.filter((m) => m.role === "assistant");
    expect(answers).toHaveLength(1);
    expect(answers[0]).toMatchObject({ content: "Hello after the wait", stopReason: "end_turn" });
  });

  it("(f) the primary keeps failing; resume with a fallback model → the answer comes from the fallback", async () => {
    const primary = await fakeServer();
    primary.enqueue({ status: 500, errorMessage: "primary is down", errorType: "server_error", times: 100 });
    const fallback = await fakeServer();
    fallback.enqueue({ text: ["From ", "the fallback"] });
    const { id } = await session(primary);
    const { runId } = await client.send(id, "Hello?");
    const run = await client.waitForRun(runId, { timeoutMs: 20_000 });
    expect(run.endedReason).toBe("provider_error");
    expect(run.error).toMatch(/primary is down/);
    expect(primary.requests.length).toBeGreaterThan(1); // retried before any output
    expect(await client.resumePoint(id)).toMatchObject({ resumable: true, kind: "call_model" });

    const resumed = await client.resume(id, {
      model: { provider: "openai", model: "gpt-fallback", baseUrl: fallback.url },
    });
    expect(resumed.kind).toBe("call_model");
    const again = await client.waitForRun(resumed.runId, { timeoutMs: 20_000 });
    expect(again.endedReason).toBe("completed");
    expect(fallback.requests).toHaveLength(1);
    expect(fallback.requests[0]!.body.model).toBe("gpt-fallback");
    expect(fallback.requests[0]!.body.messages).toEqual([{ role: "user", content: "Hello?" }]);
    const stored = await client.getSession(id);
    expect(stored.messages.at(-1)).toMatchObject({ content: "From the fallback", stopReason: "end_turn" });
    expect(stored.status).toBe("completed");
  });

  it("(g) a 401 → one request, the session parked provider_rejected with the provider's message; a resume goes on", async () => {
    const fake = await fakeServer();
    fake.enqueue(
      {
        status: 401,
        errorMessage: "Incorrect API key provided: sk-abc***xyz.",
        errorType: "invalid_request_error",
      },
      { text: ["Hello ", "with the right key"] },
    );
    const { id } = await session(fake);
    const { runId } = await client.send(id, "Hi");
    const run = await client.waitForRun(runId, { timeoutMs: 20_000 });
    expect(run.endedReason).toBe("provider_error");
    expect(run.error).toMatch(/401/);
    expect(fake.requests).toHaveLength(1); // not retried: the same request would be refused again

    const parked = await client.getSession(id);
    expect(parked.status).toBe("parked");
    expect(parked.parkedReason).toMatch(/^provider_rejected: .*Incorrect API key provided/);
    expect(parked.parkedReason).not.toContain(KEY);
    expect(parked.messages.map((m) => m.role)).toEqual(["user"]);

    // Parked, not lost: once the operator has fixed the key, an explicit resume answers.
    const resumed = await client.resume(id);
    expect(resumed.kind).toBe("call_model");
    const again = await client.waitForRun(resumed.runId, { timeoutMs: 20_000 });
    expect(again.endedReason).toBe("completed");
    expect(fake.requests).toHaveLength(2);
    const stored = await client.getSession(id);
    expect(stored.status).toBe("completed");
    expect(stored.messages.at(-1)).toMatchObject({
      content: "Hello with the right key",
      stopReason: "end_turn",
    });
  });

  it("(h) a 401 on an agent with a fallback model → one request to the primary, the worker resumes on the fallback at once", async () => {
    const primary = await fakeServer();
    primary.enqueue({
      status: 401,
      errorMessage: "Incorrect API key provided.",
      errorType: "invalid_request_error",
    });
    const fallback = await fakeServer();
    fallback.enqueue({ text: ["From ", "the fallback"] });
    const { id } = await client.createSession({
      agent: {
        model: { provider: "openai", model: "gpt-test", baseUrl: primary.url },
        fallbackModels: [{ provider: "openai", model: "gpt-fallback", baseUrl: fallback.url }],
      },
    });
    const { runId } = await client.send(id, "Hello?");
    expect((await client.waitForRun(runId, { timeoutMs: 20_000 })).endedReason).toBe("provider_error");
    // No sweeper runs in this file: the worker itself asked for the resume on the fallback.
    await waitFor(async () => (await client.getSession(id)).status === "completed", 20_000, "completed");
    const stored = await client.getSession(id);
    expect(stored.messages.at(-1)).toMatchObject({ content: "From the fallback", stopReason: "end_turn" });
    expect(primary.requests).toHaveLength(1);
    expect(fallback.requests).toHaveLength(1);
    expect(fallback.requests[0]!.body.model).toBe("gpt-fallback");
    expect(stored.runs.map((r) => [r.kind, r.trigger, r.endedReason])).toEqual([
      ["run", "api", "provider_error"],
      ["resume", "worker", "completed"],
    ]);
  });
});
