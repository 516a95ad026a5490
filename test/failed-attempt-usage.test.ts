/**
 * A model request that fails before any output, after its provider already reported usage
 * (Anthropic's `message_start` with the input tokens, then an `overloaded_error` event; an
 * OpenAI chat usage chunk, then the stream cut before `[DONE]`), was billed: its tokens count
 * against `agent.budget` and are stored as step usage is (README "Budget"). Before, only the
 * retry's tokens counted: the failed attempt's were lost, so repeated failing attempts spent
 * past `maxTokens` / `maxCostUsd` unseen.
 *
 * A real `fleet worker` and the fake provider servers of test/support.
 */
import { afterAll, beforeAll, expect, it } from "vitest";
import type { FleetClient } from "../src/producer/client.js";
import type { Usage } from "../src/shared/messages.js";
import { callModel, MAX_RATE_LIMITED } from "../src/worker/call-model.js";
import { EndpointRateLimited } from "../src/worker/endpoint-gate.js";
import { type ModelProvider, ProviderError } from "../src/worker/models/provider.js";
import { type FakeOpenAI, startFakeOpenAI } from "./support/fake-openai.js";
import { useFakeProviders } from "./support/fake-providers.js";
import { createFleetEnv, type FleetEnv, readyInfo, type WorkerProcess } from "./support/fleet-env.js";
import { noSleep, req } from "./support/model-steps.js";

const WAIT = { timeoutMs: 60_000 };
const fakes = useFakeProviders();
let fleet: FleetEnv;
let client: FleetClient;
let worker: WorkerProcess;
/** The chat server behind the declared endpoint `gated`. */
let gated: FakeOpenAI;

beforeAll(async () => {
  gated = await startFakeOpenAI();
  fleet = await createFleetEnv("failedattemptusage", {
    env: {
      FLEET_ALLOWED_BASE_URLS: "http://127.0.0.1",
      FLEET_PRICES: JSON.stringify({ "openai:gpt-billed": { input: 1, output: 1 } }),
      // A declared endpoint: its 429s are waits for capacity.
      FLEET_MODEL_ENDPOINTS: JSON.stringify({
        gated: { provider: "openai", baseUrl: gated.url, limits: { requestsPerMinute: 60_000 } },
      }),
    },
  });
  client = (await fleet.startApi()).client;
  worker = await fleet.spawnWorker();
}, 90_000);

afterAll(async () => {
  await fleet?.close();
  await gated?.close();
});

/** The worker's `fleet_model_tokens_total{provider="openai",kind="input"}`. */
async function openaiInputTokens(): Promise<number> {
  const metrics = await (await fetch(`http://127.0.0.1:${readyInfo(worker).metricsPort}/metrics`)).text();
  const series = /^fleet_model_tokens_total\{[^}]*provider="openai"[^}]*kind="input"[^}]*\} (\d+)/m.exec(
    metrics,
  );
  return Number(series?.[1] ?? 0);
}

async function tokensUsed(id: string): Promise<number> {
  const [row] = await fleet.database.sql<{ tokens_used: string }[]>`
    select tokens_used::text from sessions where id = ${id}`;
  return Number(row!.tokens_used);
}

it("anthropic: an attempt overloaded after message_start counts in the step its retry stores", async () => {
  fakes.anthropic.script(
    { usage: { input_tokens: 1000, output_tokens: 0 }, errorAfterEvents: 1 },
    { blocks: [{ type: "text", text: "done" }], usage: { input_tokens: 10, output_tokens: 5 } },
  );
  const { id } = await client.createSession({
    agent: {
      model: { provider: "anthropic", model: "claude-test", baseUrl: fakes.anthropic.url, cache: false },
    },
  });
  const run = await client.waitForRun((await client.send(id, "hi")).runId, WAIT);
  expect(run.endedReason).toBe("completed");
  expect(fakes.anthropic.requests).toHaveLength(2);
  const session = await client.getSession(id);
  const step = session.messages.find((m) => m.role === "assistant");
  // message_start reports the input and 1 output token; the retry 10 and 5.
  expect(step).toMatchObject({ content: "done", usage: { inputTokens: 1010, outputTokens: 6 } });
  expect(session.usage).toMatchObject({ inputTokens: 1010, outputTokens: 6, unknownSteps: 0 });
  expect(run.usage).toMatchObject({ inputTokens: 1010, outputTokens: 6 });
  expect(await tokensUsed(id)).toBe(1016);
});

it("openai chat: attempts cut after their usage chunk count against maxTokens, and no retry goes past it", async () => {
  const billed = { text: [], usage: { prompt_tokens: 700, completion_tokens: 0 }, omitDone: true };
  fakes.chat.enqueue({ ...billed, times: 4 });
  const { id } = await client.createSession({
    agent: {
      model: { provider: "openai", model: "gpt-billed", baseUrl: fakes.chat.url },
      budget: { maxTokens: 2000, maxCostUsd: 1 },
    },
  });
  const run = await client.waitForRun((await client.send(id, "hi")).runId, WAIT);
  // 700 + 700 leave budget for a third attempt; its 700 spend it: no fourth is sent.
  expect(fakes.chat.requests).toHaveLength(3);
  expect(run.endedReason).toBe("budget_exhausted");
  expect(run.error).toMatch(/^agent\.budget\.maxTokens: 2100 of 2000 tokens used/);
  expect(run.usage).toMatchObject({ inputTokens: 2100, outputTokens: 0, costUsd: 0.0021 });
  expect(await tokensUsed(id)).toBe(2100);
  const session = await client.getSession(id);
  expect(session.status).toBe("parked");
  expect(session.parkedReason).toMatch(/^budget_exhausted: agent\.budget\.maxTokens/);
  // A new message finds the budget spent: the model is not called again.
  const next = await client.waitForRun((await client.send(id, "again")).runId, WAIT);
  expect(next.endedReason).toBe("budget_exhausted");
  expect(fakes.chat.requests).toHaveLength(3);
});

it("a billed attempt, then 429s until the run is handed back: its tokens reach the session and the continued run's budget", async () => {
  const billed = { text: [], usage: { prompt_tokens: 700, completion_tokens: 0 }, omitDone: true };
  const refused = { status: 429, headers: { "retry-after": "0" }, errorMessage: "rate limit reached" };
  // One billed attempt; then MAX_RATE_LIMITED free asks and the refusal that hands the run
  // back; then, in the continued run, the same billed attempt again.
  gated.enqueue(billed, { ...refused, times: MAX_RATE_LIMITED + 1 }, billed);
  const metricBefore = await openaiInputTokens();
  const { id } = await client.createSession({
    agent: {
      model: { provider: "openai", endpoint: "gated", model: "gpt-billed" },
      budget: { maxTokens: 1000 },
    },
  });
  const run = await client.waitForRun((await client.send(id, "hi")).runId, WAIT);
  // The continued run starts from the 700 the first part was billed: 700 more spend the
  // budget, and no retry is sent.
  expect(gated.requests).toHaveLength(MAX_RATE_LIMITED + 3);
  expect(run.endedReason).toBe("budget_exhausted");
  expect(run.error).toMatch(/^agent\.budget\.maxTokens: 1400 of 1000 tokens used/);
  expect(run.usage).toMatchObject({ inputTokens: 1400, outputTokens: 0, costUsd: 0.0014, handBacks: 1 });
  expect(await tokensUsed(id)).toBe(1400);
  // Each billed attempt counted once in the token metric as well.
  expect((await openaiInputTokens()) - metricBefore).toBe(1400);
});

it("a gated endpoint overloaded after message_start: a billed attempt, not a wait for capacity", async () => {
  // What gatedModel throws for an in-stream overloaded_error (endpoint-gate.ts), after the
  // provider reported the request's input: it was billed, so it is counted as an attempt and
  // each retry asks the budget, instead of up to MAX_RATE_LIMITED free asks and a hand-back.
  const overloaded = new ProviderError("Overloaded", true, undefined, { type: "overloaded_error" });
  const model: ModelProvider = {
    identity: { provider: "anthropic", model: "claude-test" },
    async *stream() {
      yield { type: "usage", usage: { inputTokens: 1000, outputTokens: 1 } };
      throw new EndpointRateLimited("gateway", overloaded, 5_000);
    },
  };
  const asked: (Usage | undefined)[] = [];
  const step = await callModel(model, req([{ role: "user", content: "hi" }]), {
    sleep: noSleep,
    policy: { maxAttempts: 3, baseDelayMs: 1, maxDelayMs: 1 },
    reserveRetry: async (billed) => {
      asked.push(billed);
      return null;
    },
  });
  expect(step).toMatchObject({ ok: false, attempts: 3, billed: { inputTokens: 3000, outputTokens: 3 } });
  expect(asked).toEqual([
    { inputTokens: 1000, outputTokens: 1 },
    { inputTokens: 2000, outputTokens: 2 },
  ]);
});
