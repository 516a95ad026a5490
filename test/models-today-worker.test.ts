/**
 * Contracts §13 end to end: the in-process API, real `fleet worker` processes, the in-process
 * sweeper, and local servers speaking the Anthropic Messages API and the OpenAI Responses /
 * chat APIs, which reject what the real services reject (a tool-result turn without its
 * thinking blocks, a function call without its reasoning item). Thinking and reasoning are
 * replayed byte for byte — also after a SIGKILL mid-tool and a `recover_tools` resume —,
 * requests carry cache breakpoints, stored usage has cache tokens, cost is usage × FLEET_PRICES,
 * and a fallback to another provider gets no provider state.
 */
import { afterAll, afterEach, beforeAll, describe, expect, it } from "vitest";
import { FleetApiError, type FleetClient } from "../src/producer/client.js";
import { loadConfig } from "../src/shared/config.js";
import type { StoredMessage, Usage } from "../src/shared/messages.js";
import { costOf } from "../src/shared/prices.js";
import { CONTINUE_RESPONSE_TEXT, RETRY_RESPONSE_TEXT } from "../src/shared/resume-plan.js";
import { totalUsageOfSessions } from "../src/shared/store/session-usage.js";
import { startSweeper } from "../src/sweeper/sweeper-process.js";
import { type FakeAnthropic, signatureOf, startFakeAnthropic } from "./support/fake-anthropic.js";
import { type FakeOpenAI, startFakeOpenAI } from "./support/fake-openai.js";
import { type FakeResponses, startFakeResponses } from "./support/fake-openai-responses.js";
import {
  createFleetEnv,
  type FleetEnv,
  readyInfo,
  seqsOf,
  type WorkerProcess,
  waitFor,
} from "./support/fleet-env.js";
import { INTERRUPTED_TEXT } from "./support/sleepy-sessions.js";

const PRICES = {
  "claude-test": { input: 3, output: 15, cacheRead: 0.3, cacheWrite: 3.75 },
  "openai:gpt-test": { input: 1.25, output: 10, cacheRead: 0.125 },
};
const WAIT = { timeoutMs: 20_000 };
const EPHEMERAL = { type: "ephemeral" };

type Block = Record<string, unknown>;
type Body = { messages: { role: string; content: Block[] }[]; system?: Block[]; tools?: Block[] };

describe("models as they are used today, through workers", () => {
  let fleet: FleetEnv;
  let client: FleetClient;
  let worker: WorkerProcess;
  const closers: { close(): Promise<void> }[] = [];

  beforeAll(async () => {
    fleet = await createFleetEnv("modelstoday", {
      env: { FLEET_ALLOWED_BASE_URLS: "http://127.0.0.1", FLEET_PRICES: JSON.stringify(PRICES) },
    });
    ({ client } = await fleet.startApi());
    worker = await fleet.spawnWorker();
  });
  afterEach(async () => {
    for (const c of closers.splice(0)) await c.close();
  });
  afterAll(async () => {
    await fleet?.close();
  });

  async function anthropicFake(): Promise<FakeAnthropic> {
    const fake = await startFakeAnthropic();
    closers.push(fake);
    return fake;
  }
  const claude = (fake: FakeAnthropic) => ({
    provider: "anthropic" as const,
    model: "claude-test",
    baseUrl: fake.url,
    maxTokens: 8000,
    thinking: { type: "enabled" as const, budgetTokens: 2048 },
  });
  const thinkingBlock = (thinking: string) => ({
    type: "thinking",
    thinking,
    signature: signatureOf(thinking),
  });
  const usages = (messages: StoredMessage[]) =>
    messages.flatMap((m) => (m.role === "assistant" && m.usage ? [m.usage] : []));
  const expectedCost = (list: Usage[], price: (typeof PRICES)[keyof typeof PRICES]) =>
    list.reduce((sum, u) => sum + costOf(u, price), 0);

  it("anthropic thinking: two tool turns complete, each request replays the earlier thinking byte for byte, with cache breakpoints; cost = usage × prices", async () => {
    const fake = await anthropicFake();
    const t1 = 'First I write a.txt. Ünïcödé and "quotes" stay exact.';
    const t2 = "Now b.txt.";
    fake.script(
      {
        blocks: [
          thinkingBlock(t1) as never,
          { type: "tool_use", id: "toolu_a", name: "write_file", input: { path: "a.txt", content: "a" } },
        ],
        stopReason: "tool_use",
        usage: { input_tokens: 40, output_tokens: 30, cache_creation_input_tokens: 1200 },
      },
      {
        blocks: [
          thinkingBlock(t2) as never,
          { type: "text", text: "Next." },
          { type: "tool_use", id: "toolu_b", name: "write_file", input: { path: "b.txt", content: "b" } },
        ],
        stopReason: "tool_use",
        usage: {
          input_tokens: 60,
          output_tokens: 35,
          cache_read_input_tokens: 1200,
          cache_creation_input_tokens: 100,
        },
      },
      {
        blocks: [{ type: "text", text: "Both written." }],
        usage: { input_tokens: 20, output_tokens: 6, cache_read_input_tokens: 1300 },
      },
    );
    const { id } = await client.createSession({
      agent: { model: claude(fake), tools: ["write_file"], system: "You write files." },
    });
    const { runId } = await client.send(id, "Write a.txt and b.txt");
    const run = await client.waitForRun(runId, WAIT);
    expect(run.endedReason).toBe("completed");
    expect(fake.requests).toHaveLength(3);

    const bodies = fake.requests.map((r) => r.body as unknown as Body);
    // Request 2 replays turn 1 with its thinking first; request 3 replays both turns.
    expect(bodies[1]!.messages[1]!.content[0]).toEqual(thinkingBlock(t1));
    expect(bodies[2]!.messages[1]!.content[0]).toEqual(thinkingBlock(t1));
    expect(bodies[2]!.messages[3]!.content.slice(0, 2)).toEqual([
      thinkingBlock(t2),
      { type: "text", text: "Next." },
    ]);
    for (const body of bodies) {
      expect(body.system).toEqual([{ type: "text", text: "You write files.", cache_control: EPHEMERAL }]);
      expect(body.tools!.at(-1)!.cache_control).toEqual(EPHEMERAL);
      expect(body.messages.at(-1)!.content.at(-1)!.cache_control).toEqual(EPHEMERAL);
      expect(JSON.stringify(body).match(/cache_control/g)!.length).toBeLessThanOrEqual(4);
    }

    const session = await client.getSession(id);
    expect(seqsOf(session.messages)).toEqual([1, 2, 3, 4, 5, 6]);
    const steps = session.messages.filter((m) => m.role === "assistant");
    expect(steps[0]).toMatchObject({
      providerState: {
        provider: "anthropic",
        api: "messages",
        content: [thinkingBlock(t1), { type: "tool_use" }],
      },
      usage: { inputTokens: 1240, outputTokens: 30, cacheWriteTokens: 1200, cacheReadTokens: 0 },
    });
    expect(steps[1]!.usage).toMatchObject({
      inputTokens: 1360,
      cacheReadTokens: 1200,
      cacheWriteTokens: 100,
    });
    expect(steps[2]!.usage).toMatchObject({ inputTokens: 1320, cacheReadTokens: 1300 });
    expect(steps[2]).not.toHaveProperty("providerState"); // no thinking in that step

    const cost = expectedCost(usages(session.messages), PRICES["claude-test"]);
    expect(cost).toBeGreaterThan(0);
    const totals = (session as unknown as { usage: { costUsd: number; cacheReadTokens: number } }).usage;
    expect(totals.costUsd).toBeCloseTo(cost, 9);
    expect(totals.cacheReadTokens).toBe(2500);
    expect((run as unknown as { usage: { costUsd: number } }).usage.costUsd).toBeCloseTo(cost, 9);
    expect((await totalUsageOfSessions(fleet.database, [id])).costUsd).toBeCloseTo(cost, 9);

    // fleet_model_tokens_total{provider,kind}: what the provider reported, every series from 0.
    const metrics = await (await fetch(`http://127.0.0.1:${readyInfo(worker).metricsPort}/metrics`)).text();
    const series = (provider: string, kind: string) =>
      Number(
        metrics.match(
          new RegExp(
            `^fleet_model_tokens_total\\{[^}]*provider="${provider}"[^}]*kind="${kind}"[^}]*\\} (\\d+)`,
            "m",
          ),
        )?.[1],
      );
    expect(series("anthropic", "cache_read")).toBe(2500);
    expect(series("anthropic", "cache_write")).toBe(1300);
    expect(series("anthropic", "output")).toBe(71);
    expect(series("openai", "reasoning")).toBe(0);
  });

  it("batch cost: each results line's usage.costUsd and the batch's ?include=usage equal usage × prices", async () => {
    const fake = await anthropicFake();
    fake.script(
      { blocks: [{ type: "text", text: "one" }], usage: { input_tokens: 100, output_tokens: 10 } },
      {
        blocks: [{ type: "text", text: "two" }],
        usage: { input_tokens: 50, output_tokens: 20, cache_read_input_tokens: 400 },
      },
    );
    const batch = await client.createBatch([
      { agent: { model: claude(fake) }, input: "first", customId: "a" },
      { agent: { model: claude(fake) }, input: "second", customId: "b" },
    ] as never);
    for (const s of batch.sessions) await client.waitForRun(s.runId!, WAIT);
    let sum = 0;
    const lines = [];
    for await (const line of client.batchResults(batch.id)) lines.push(line);
    expect(lines).toHaveLength(2);
    for (const line of lines) {
      const session = await client.getSession(line.sessionId);
      const cost = expectedCost(usages(session.messages), PRICES["claude-test"]);
      expect(cost).toBeGreaterThan(0);
      expect((line.usage as { costUsd: number }).costUsd).toBeCloseTo(cost, 9);
      sum += cost;
    }
    const base = (client as unknown as { baseUrl: string }).baseUrl;
    const answer = await fetch(`${base}/v1/batches/${batch.id}?include=usage`);
    const withUsage = (await answer.json()) as { usage: { costUsd: number; cacheReadTokens: number } };
    expect(withUsage.usage.costUsd).toBeCloseTo(sum, 9);
    expect(withUsage.usage.cacheReadTokens).toBe(400);
    expect(await client.getBatch(batch.id)).not.toHaveProperty("usage");
  });

  it("SIGKILL mid-tool: the recover_tools resume sends the thinking blocks of the turn that asked for the tool", async () => {
    const fake = await anthropicFake();
    const thinking = "I'll wait a while, then answer.";
    fake.script(
      {
        blocks: [
          thinkingBlock(thinking) as never,
          { type: "tool_use", id: "nap", name: "sleep", input: { ms: 30_000 } },
        ],
        stopReason: "tool_use",
      },
      { blocks: [{ type: "text", text: "1 tool was interrupted" }] },
    );
    const sweeper = await startSweeper(
      { ...loadConfig(fleet.env), logLevel: "silent" },
      { serveMetrics: false },
    );
    closers.push({ close: () => sweeper.stop() });
    const { id } = await client.createSession({ agent: { model: claude(fake), tools: ["sleep"] } });
    await client.send(id, "Nap, then answer");
    await waitFor(
      async () => fake.requests.length === 1 && (await client.getSession(id)).messages.length === 2,
      15_000,
      "inside sleep",
    );
    await new Promise((r) => setTimeout(r, 200));
    worker.child.kill("SIGKILL");
    await worker.exited;
    worker = await fleet.spawnWorker();

    await waitFor(async () => (await client.getSession(id)).status === "completed", 30_000, "recovered");
    const session = await client.getSession(id);
    expect(session.messages.find((m) => m.role === "tool")).toMatchObject({
      toolCallId: "nap",
      success: false,
      content: INTERRUPTED_TEXT,
    });
    expect(session.runs.find((r) => r.kind === "resume")).toMatchObject({
      resumeKind: "recover_tools",
      endedReason: "completed",
    });
    expect(fake.requests).toHaveLength(2);
    const body = fake.requests[1]!.body as unknown as Body;
    expect(body.messages[1]!.content).toEqual([
      thinkingBlock(thinking),
      { type: "tool_use", id: "nap", name: "sleep", input: { ms: 30_000 } },
    ]);
    expect(body.messages[2]!.content[0]).toMatchObject({
      type: "tool_result",
      tool_use_id: "nap",
      is_error: true,
    });
  }, 60_000);

  describe("openai responses", () => {
    async function responsesFake(): Promise<FakeResponses> {
      const fake = await startFakeResponses();
      closers.push(fake);
      return fake;
    }
    const gpt = (fake: FakeResponses) => ({
      provider: "openai" as const,
      model: "gpt-test",
      baseUrl: fake.url,
      api: "responses" as const,
      reasoningEffort: "low" as const,
    });

    it("a tool session completes with its reasoning items replayed; cost = usage × prices", async () => {
      const fake = await responsesFake();
      fake.script(
        {
          reasoning: true,
          functionCalls: [
            { callId: "call_a", name: "write_file", arguments: '{"path":"r.txt","content":"r"}' },
          ],
          usage: { input_tokens: 80, output_tokens: 40, cached_tokens: 64, reasoning_tokens: 30 },
        },
        { text: ["Wrote ", "r.txt"], usage: { input_tokens: 120, output_tokens: 5, cached_tokens: 64 } },
      );
      const { id } = await client.createSession({ agent: { model: gpt(fake), tools: ["write_file"] } });
      const run = await client.waitForRun((await client.send(id, "Write r.txt")).runId, WAIT);
      expect(run.endedReason).toBe("completed");
      const session = await client.getSession(id);
      const first = session.messages[1]!;
      expect(first).toMatchObject({
        role: "assistant",
        stopReason: "tool_use",
        usage: { reasoningTokens: 30, cacheReadTokens: 64 },
      });
      const reasoning = (first as unknown as { providerState: { output: Block[] } }).providerState.output[0];
      expect(reasoning).toMatchObject({ type: "reasoning", encrypted_content: expect.any(String) });
      expect(fake.requests[1]!.body.input[1]).toEqual(reasoning);
      expect(fake.requests[1]!.body).toMatchObject({ store: false, reasoning: { effort: "low" } });
      const cost = expectedCost(usages(session.messages), PRICES["openai:gpt-test"]);
      expect((session as unknown as { usage: { costUsd: number } }).usage.costUsd).toBeCloseTo(cost, 9);
    });

    it("a cut stream → interrupted → retry_response → completed; incomplete → max_output → continue_response", async () => {
      const fake = await responsesFake();
      fake.script({ reasoning: true, text: ["Part", "ial"], cutAfterEvents: 5 }, { text: ["Redone."] });
      const { id } = await client.createSession({ agent: { model: gpt(fake) } });
      const cut = await client.waitForRun((await client.send(id, "Answer")).runId, WAIT);
      expect(cut.endedReason).toBe("interrupted");
      const resume = await client.resume(id);
      expect(resume.kind).toBe("retry_response");
      expect((await client.waitForRun(resume.runId, WAIT)).endedReason).toBe("completed");
      const retried = fake.requests[1]!.body.input as Block[];
      expect(retried.map((i) => i.type ?? i.role)).toEqual(["user", "assistant", "user"]);
      expect(retried[2]).toEqual({ role: "user", content: RETRY_RESPONSE_TEXT });
      const messages = (await client.getSession(id)).messages;
      expect(messages[1]).toMatchObject({ stopReason: "interrupted", content: "Part" });
      expect(messages[1]).not.toHaveProperty("providerState");

      fake.script(
        { reasoning: true, text: ["Long answ"], incomplete: "max_output_tokens" },
        { text: ["er."] },
      );
      const long = await client.waitForRun((await client.send(id, "Long one")).runId, WAIT);
      expect(long.endedReason).toBe("max_output");
      const more = await client.resume(id);
      expect(more.kind).toBe("continue_response");
      expect((await client.waitForRun(more.runId, WAIT)).endedReason).toBe("completed");
      const continued = fake.requests[3]!.body.input as Block[];
      expect(continued.at(-1)).toEqual({ role: "user", content: CONTINUE_RESPONSE_TEXT });
      // The whole (max_output) step's reasoning and message items went back with it.
      expect(continued.at(-3)).toMatchObject({ type: "reasoning" });
      expect(continued.at(-2)).toMatchObject({ type: "message", role: "assistant" });
    });
  });

  it("a fallback from anthropic to openai mid-session: no provider state leaks across", async () => {
    const fake = await anthropicFake();
    const chat: FakeOpenAI = await startFakeOpenAI();
    closers.push(chat);
    const thinking = "Private reasoning that stays with Anthropic.";
    fake.script(
      {
        blocks: [
          thinkingBlock(thinking) as never,
          { type: "tool_use", id: "toolu_f", name: "write_file", input: { path: "f.txt", content: "f" } },
        ],
        stopReason: "tool_use",
      },
      { blocks: [{ type: "text", text: "Almost", chunks: ["Alm", "ost"] }], cutAfterEvents: 4 },
    );
    const { id } = await client.createSession({ agent: { model: claude(fake), tools: ["write_file"] } });
    const run = await client.waitForRun((await client.send(id, "Write f.txt")).runId, WAIT);
    expect(run.endedReason).toBe("interrupted");
    chat.enqueue({ text: ["Done via fallback."] });
    const resume = await client.resume(id, {
      model: { provider: "openai", model: "gpt-test", baseUrl: chat.url },
    });
    expect((await client.waitForRun(resume.runId, WAIT)).endedReason).toBe("completed");
    const sent = JSON.stringify(chat.requests[0]!.body);
    expect(sent).not.toContain(thinking);
    expect(sent).not.toContain("signature");
    expect(sent).toContain("toolu_f"); // the tool call and its result are still there, as plain history
  });

  it("agent.budget.maxCostUsd: refused for an unpriced model (400 naming it); a priced session parks budget_exhausted", async () => {
    const error = await client
      .createSession({
        agent: {
          model: { provider: "anthropic", model: "claude-unpriced", baseUrl: "http://127.0.0.1:9" },
          budget: { maxCostUsd: 1 },
        },
      })
      .catch((e: unknown) => e);
    expect(error).toBeInstanceOf(FleetApiError);
    expect((error as FleetApiError).status).toBe(400);
    expect((error as FleetApiError).field).toBe("agent.model.model");

    const fake = await anthropicFake();
    // 100k output tokens at $15/M = $1.50 > $1: the first step crosses the budget.
    fake.script({
      blocks: [{ type: "tool_use", id: "t", name: "write_file", input: { path: "x.txt", content: "x" } }],
      stopReason: "tool_use",
      usage: { input_tokens: 10, output_tokens: 100_000 },
    });
    const { id } = await client.createSession({
      agent: {
        model: { provider: "anthropic", model: "claude-test", baseUrl: fake.url, cache: false },
        tools: ["write_file"],
        budget: { maxCostUsd: 1 },
      },
    });
    const run = await client.waitForRun((await client.send(id, "Spend")).runId, WAIT);
    expect(run.endedReason).toBe("budget_exhausted");
    expect(run.error).toMatch(/agent\.budget\.maxCostUsd: 1\.5\d* of 1 USD used/);
    expect(fake.requests).toHaveLength(1);
    expect((await client.getSession(id)).status).toBe("parked");
  });
});
