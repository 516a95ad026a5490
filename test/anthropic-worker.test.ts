/**
 * The Anthropic provider end to end: the in-process API, a real `fleet worker` child process
 * with ANTHROPIC_API_KEY in its environment, and local servers speaking the Messages API
 * wire protocol (test/support/fake-anthropic.ts). Each test gets its own fake server, on a
 * random port of 127.0.0.1 named as a raw `baseUrl` under FLEET_ALLOWED_BASE_URLS (so it gets
 * no key: contracts §11).
 */
import { readFile } from "node:fs/promises";
import { join } from "node:path";
import { afterAll, afterEach, beforeAll, describe, expect, it } from "vitest";
import { FleetApiError, type FleetClient } from "../src/producer/client.js";
import type { ModelConfig } from "../src/shared/agent-config.js";
import { CONTINUE_RESPONSE_TEXT, RETRY_RESPONSE_TEXT } from "../src/shared/resume-plan.js";
import { type FakeAnthropic, type FakeResponse, startFakeAnthropic } from "./support/fake-anthropic.js";
import { createFleetEnv, type FleetEnv, seqsOf, type WorkerProcess } from "./support/fleet-env.js";

const KEY = "test-key";
const RUN_TIMEOUT = { timeoutMs: 20_000 };

describe("the anthropic provider through the API and a worker process", () => {
  let fleet: FleetEnv;
  let client: FleetClient;
  let worker: WorkerProcess;
  const fakes: FakeAnthropic[] = [];

  beforeAll(async () => {
    fleet = await createFleetEnv("anthropicworker", {
      env: { FLEET_ALLOWED_BASE_URLS: "http://127.0.0.1" },
    });
    ({ client } = await fleet.startApi());
    worker = await fleet.spawnWorker({ ANTHROPIC_API_KEY: KEY });
  });
  afterEach(async () => {
    for (const fake of fakes.splice(0)) await fake.close();
  });
  afterAll(async () => {
    // The key was in the worker's environment only: it never shows up in its output.
    if (worker) expect(worker.output()).not.toContain(KEY);
    await fleet?.close();
  });

  async function fakeServer(...responses: FakeResponse[]): Promise<FakeAnthropic> {
    const fake = await startFakeAnthropic(responses);
    fakes.push(fake);
    return fake;
  }

  function anthropic(fake: FakeAnthropic, name = "claude-test"): ModelConfig {
    // Without cache breakpoints: these tests compare the turns exactly (caching: models-today*.test.ts).
    return { provider: "anthropic", model: name, baseUrl: fake.url, cache: false };
  }

  async function session(fake: FakeAnthropic, tools: string[] = []): Promise<string> {
    const { id } = await client.createSession({
      agent: { model: anthropic(fake), tools, pauseLimit: 2 },
    });
    return id;
  }

  async function sendAndWait(id: string, content: string) {
    const { runId } = await client.send(id, content);
    return client.waitForRun(runId, RUN_TIMEOUT);
  }

  async function expect409(id: string, reason: string) {
    const error = await client.resume(id).catch((e: unknown) => e);
    expect(error).toBeInstanceOf(FleetApiError);
    expect((error as FleetApiError).status).toBe(409);
    expect((error as FleetApiError).reason).toBe(reason);
  }

  it("(a) tool_use → the tool runs → end_turn → completed", async () => {
    const fake = await fakeServer(
      {
        blocks: [
          { type: "text", text: "Writing it." },
          {
            type: "tool_use",
            id: "toolu_a",
            name: "write_file",
            input: { path: "notes.txt", content: "hi" },
          },
        ],
        stopReason: "tool_use",
      },
      {
        blocks: [{ type: "text", text: "Done: wrote notes.txt" }],
        usage: { input_tokens: 50, output_tokens: 7 },
      },
    );
    const id = await session(fake, ["write_file"]);
    const run = await sendAndWait(id, "Write notes.txt");
    expect(run.endedReason).toBe("completed");

    expect(await readFile(join(fleet.config.toolDir, "notes.txt"), "utf8")).toBe("hi");
    const { messages } = await client.getSession(id);
    expect(messages.map((m) => m.role)).toEqual(["user", "assistant", "tool", "assistant"]);
    expect(messages[1]).toMatchObject({
      content: "Writing it.",
      stopReason: "tool_use",
      toolCalls: [{ id: "toolu_a", name: "write_file", arguments: { path: "notes.txt", content: "hi" } }],
    });
    expect(messages[2]).toMatchObject({ role: "tool", toolCallId: "toolu_a", success: true });
    expect(messages[3]).toMatchObject({
      content: "Done: wrote notes.txt",
      stopReason: "end_turn",
      usage: { inputTokens: 50, outputTokens: 7 },
    });
    expect(seqsOf(messages)).toEqual([1, 2, 3, 4]);

    expect(fake.requests).toHaveLength(2);
    expect(fake.requests[0]?.body.tools).toEqual([expect.objectContaining({ name: "write_file" })]);
    expect(fake.requests[1]?.body.messages.at(-1)).toEqual({
      role: "user",
      content: [{ type: "tool_result", tool_use_id: "toolu_a", content: messages[2]?.content }],
    });
  });

  it("(b) pause_turn twice, then end_turn: continued automatically, completed", async () => {
    const fake = await fakeServer(
      { blocks: [{ type: "text", text: "Looking. " }], stopReason: "pause_turn" },
      { blocks: [{ type: "text", text: "Still looking. " }], stopReason: "pause_turn" },
      { blocks: [{ type: "text", text: "Found it." }], stopReason: "end_turn" },
    );
    const id = await session(fake);
    const run = await sendAndWait(id, "Find it");
    expect(run.endedReason).toBe("completed");

    const { messages } = await client.getSession(id);
    const assistants = messages.filter((m) => m.role === "assistant");
    expect(assistants).toHaveLength(3);
    expect(assistants.map((m) => m.stopReason)).toEqual(["paused", "paused", "end_turn"]);
    expect(fake.requests).toHaveLength(3);
    // Each continuation replays the paused steps as they are.
    expect(fake.requests[2]?.body.messages).toEqual([
      { role: "user", content: [{ type: "text", text: "Find it" }] },
      {
        role: "assistant",
        content: [
          { type: "text", text: "Looking. " },
          { type: "text", text: "Still looking." },
        ],
      },
    ]);
  });

  it("(c) pause_turn three times with pauseLimit 2: the run ends paused; resume completes it", async () => {
    const fake = await fakeServer(
      { blocks: [{ type: "text", text: "One." }], stopReason: "pause_turn" },
      { blocks: [{ type: "text", text: "Two." }], stopReason: "pause_turn" },
      { blocks: [{ type: "text", text: "Three." }], stopReason: "pause_turn" },
    );
    const id = await session(fake);
    const run = await sendAndWait(id, "Go");
    expect(run.endedReason).toBe("paused");
    expect(fake.requests).toHaveLength(3);

    expect(await client.resumePoint(id)).toMatchObject({ resumable: true, kind: "call_model" });
    fake.script({ blocks: [{ type: "text", text: "Finished." }] });
    const resumed = await client.resume(id);
    expect(resumed.kind).toBe("call_model");
    const after = await client.waitForRun(resumed.runId, RUN_TIMEOUT);
    expect(after.endedReason).toBe("completed");

    const { messages } = await client.getSession(id);
    expect(messages.map((m) => (m.role === "assistant" ? m.stopReason : m.role))).toEqual([
      "user",
      "paused",
      "paused",
      "paused",
      "end_turn",
    ]);
    expect(fake.requests[3]?.body.messages.at(-1)).toEqual({
      role: "assistant",
      content: [
        { type: "text", text: "One." },
        { type: "text", text: "Two." },
        { type: "text", text: "Three." },
      ],
    });
    await expect409(id, "completed");
  });

  it("(d) a stream cut mid-text → interrupted with the partial; resume retries the response", async () => {
    const fake = await fakeServer({
      blocks: [{ type: "text", text: "The answer is 42.", chunks: ["The ans", "wer is", " 42."] }],
      cutAfterEvents: 4, // message_start, block start, two deltas
    });
    const id = await session(fake);
    const run = await sendAndWait(id, "What is the answer?");
    expect(run.endedReason).toBe("interrupted");
    expect(fake.requests).toHaveLength(1);

    const before = await client.getSession(id);
    expect(before.messages.at(-1)).toMatchObject({
      role: "assistant",
      content: "The answer is",
      stopReason: "interrupted",
    });
    expect(await client.resumePoint(id)).toMatchObject({ resumable: true, kind: "retry_response" });

    fake.script({ blocks: [{ type: "text", text: "The answer is 42." }] });
    const resumed = await client.resume(id);
    expect(resumed.kind).toBe("retry_response");
    expect((await client.waitForRun(resumed.runId, RUN_TIMEOUT)).endedReason).toBe("completed");

    const { messages } = await client.getSession(id);
    expect(messages.map((m) => m.role)).toEqual(["user", "assistant", "internal", "assistant"]);
    expect(messages.at(-1)).toMatchObject({ content: "The answer is 42.", stopReason: "end_turn" });
    expect(fake.requests[1]?.body.messages).toEqual([
      { role: "user", content: [{ type: "text", text: "What is the answer?" }] },
      { role: "assistant", content: [{ type: "text", text: "The answer is" }] },
      { role: "user", content: [{ type: "text", text: RETRY_RESPONSE_TEXT }] },
    ]);
  });

  it("(e) max_tokens → max_output; resume continues the response", async () => {
    const fake = await fakeServer({
      blocks: [{ type: "text", text: "A long ans" }],
      stopReason: "max_tokens",
    });
    const id = await session(fake);
    const run = await sendAndWait(id, "Write a lot");
    expect(run.endedReason).toBe("max_output");
    expect(await client.resumePoint(id)).toMatchObject({ resumable: true, kind: "continue_response" });

    fake.script({ blocks: [{ type: "text", text: "wer." }] });
    const resumed = await client.resume(id);
    expect(resumed.kind).toBe("continue_response");
    expect((await client.waitForRun(resumed.runId, RUN_TIMEOUT)).endedReason).toBe("completed");

    const { messages } = await client.getSession(id);
    expect(messages.map((m) => (m.role === "assistant" ? m.stopReason : m.role))).toEqual([
      "user",
      "max_output",
      "internal",
      "end_turn",
    ]);
    expect(fake.requests[1]?.body.messages.slice(1)).toEqual([
      { role: "assistant", content: [{ type: "text", text: "A long ans" }] },
      { role: "user", content: [{ type: "text", text: CONTINUE_RESPONSE_TEXT }] },
    ]);
  });

  it("(f) 400 prompt is too long → context_full; resume is refused with 409 context_full", async () => {
    const fake = await fakeServer({
      status: 400,
      error: { type: "invalid_request_error", message: "prompt is too long: 210000 tokens > 200000 maximum" },
    });
    const id = await session(fake);
    const run = await sendAndWait(id, "Huge input");
    expect(run.endedReason).toBe("context_full");
    expect(fake.requests).toHaveLength(1);

    const { messages } = await client.getSession(id);
    expect(messages.at(-1)).toMatchObject({ role: "assistant", content: "", stopReason: "context_full" });
    expect(await client.resumePoint(id)).toEqual({ resumable: false, reason: "context_full" });
    await expect409(id, "context_full");
  });

  it("(g) 429 with retry-after, then success → completed with one assistant message", async () => {
    const fake = await fakeServer(
      {
        status: 429,
        headers: { "retry-after": "1" },
        error: { type: "rate_limit_error", message: "rate limited" },
      },
      { blocks: [{ type: "text", text: "Hello!" }] },
    );
    const id = await session(fake);
    const run = await sendAndWait(id, "Hi");
    expect(run.endedReason).toBe("completed");
    expect(fake.requests).toHaveLength(2);
    // The worker waited as long as retry-after asked (1 s) before the second attempt.
    expect(fake.requests[1]!.at - fake.requests[0]!.at).toBeGreaterThanOrEqual(950);

    const { messages } = await client.getSession(id);
    expect(messages.filter((m) => m.role === "assistant")).toEqual([
      expect.objectContaining({ content: "Hello!", stopReason: "end_turn" }),
    ]);
  });

  it("(h) a provider that keeps failing: resume with a model on a second server answers from it", async () => {
    const overloaded: FakeResponse = {
      status: 529,
      error: { type: "overloaded_error", message: "Overloaded" },
    };
    const primary = await fakeServer(overloaded, overloaded, overloaded, overloaded);
    const fallback = await fakeServer({ blocks: [{ type: "text", text: "Answer from the fallback." }] });
    const id = await session(primary);
    const run = await sendAndWait(id, "Hello?");
    expect(run.endedReason).toBe("provider_error");
    expect(run.error).toMatch(/overloaded/i);
    expect(run.error).not.toContain(KEY);
    expect(primary.requests).toHaveLength(4);

    expect(await client.resumePoint(id)).toMatchObject({ resumable: true, kind: "call_model" });
    const resumed = await client.resume(id, { model: anthropic(fallback, "claude-fallback") });
    expect((await client.waitForRun(resumed.runId, RUN_TIMEOUT)).endedReason).toBe("completed");

    const { messages } = await client.getSession(id);
    expect(messages.map((m) => m.role)).toEqual(["user", "assistant"]);
    expect(messages.at(-1)).toMatchObject({ content: "Answer from the fallback.", stopReason: "end_turn" });
    expect(fallback.requests).toHaveLength(1);
    expect(fallback.requests[0]?.body.model).toBe("claude-fallback");
    expect(primary.requests).toHaveLength(4);
  });

  it("(i) a 401 → one request; the session is parked provider_rejected with the provider's message", async () => {
    const fake = await fakeServer({
      status: 401,
      error: { type: "authentication_error", message: "invalid x-api-key" },
    });
    const id = await session(fake);
    const run = await sendAndWait(id, "Hi");
    expect(run.endedReason).toBe("provider_error");
    expect(fake.requests).toHaveLength(1);
    const parked = await client.getSession(id);
    expect(parked.status).toBe("parked");
    expect(parked.parkedReason).toMatch(/^provider_rejected: .*invalid x-api-key/);
    expect(parked.parkedReason).not.toContain(KEY);
  });
});
