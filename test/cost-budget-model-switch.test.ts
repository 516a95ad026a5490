/**
 * `agent.budget.maxCostUsd` when the session goes on with a cheaper model (README "Budget":
 * estimates of steps with unknown usage count at the session's later claims, so a provider that
 * never reports usage cannot spend past maxCostUsd one run at a time). Those estimates are kept
 * only as tokens (the session's `tokens_used`), priced again at each claim — at the price of the
 * model the claim runs: a resume on a cheaper model (`POST …/resume {"model"}`, or a fallback
 * the worker turns to) priced what the expensive model had spent at the cheap one's price, and
 * the budget was all but whole again.
 *
 * A real `fleet worker` and OpenAI-compatible servers that stream no usage chunk. A model at
 * 10,000 USD per million tokens spends a budget of 0.01 USD with one step (about 0.2 USD
 * estimated); a model at 0.000001 USD per million then asked must find the budget spent and be
 * called for nothing: a resume on it after the agent's dear model, and the agent's cheap model
 * after a resume on the dear one (an earlier run's model, `runs.model`).
 */
import { afterAll, beforeAll, expect, it } from "vitest";
import type { FleetClient } from "../src/producer/client.js";
import { type FakeOpenAI, startFakeOpenAI } from "./support/fake-openai.js";
import { createFleetEnv, type FleetEnv } from "./support/fleet-env.js";

const WAIT = 60_000;
let fleet: FleetEnv;
let client: FleetClient;
let dear: FakeOpenAI;
let cheap: FakeOpenAI;
/** The agent's cheap model of the second case: a tool call (usage reported), then text. */
let cheapAgent: FakeOpenAI;

beforeAll(async () => {
  dear = await startFakeOpenAI([], { respond: () => ({ text: ["dear"], usage: null }) });
  cheap = await startFakeOpenAI([], { respond: () => ({ text: ["cheap"], usage: null }) });
  cheapAgent = await startFakeOpenAI([], {
    respond: (body) =>
      body.messages.at(-1)?.role === "user" && body.messages.length <= 2
        ? {
            toolCalls: [{ id: "nap", name: "sleep", arguments: '{"ms":0}' }],
            usage: { prompt_tokens: 1, completion_tokens: 1 },
          }
        : { text: ["cheap"], usage: { prompt_tokens: 1, completion_tokens: 1 } },
  });
  fleet = await createFleetEnv("costmodelswitch", {
    env: {
      FLEET_ALLOWED_BASE_URLS: "http://127.0.0.1",
      FLEET_PRICES: JSON.stringify({
        "openai:gpt-dear": { input: 10_000, output: 10_000 },
        "openai:gpt-cheap": { input: 0.000001, output: 0.000001 },
      }),
    },
  });
  client = (await fleet.startApi()).client;
  await fleet.spawnWorker();
}, 90_000);

afterAll(async () => {
  await fleet?.close();
  await dear?.close();
  await cheap?.close();
  await cheapAgent?.close();
});

it("a resume on a cheaper model finds the budget the dearer model's estimates spent", async () => {
  const { id } = await client.createSession({
    agent: {
      model: { provider: "openai", model: "gpt-dear", baseUrl: dear.url },
      budget: { maxCostUsd: 0.01 },
    },
  });
  // The first message's step completes (0 spent before it); the second finds the budget spent.
  const first = await client.waitForRun((await client.send(id, "one")).runId, { timeoutMs: WAIT });
  expect(first.endedReason).toBe("completed");
  const second = await client.waitForRun((await client.send(id, "two")).runId, { timeoutMs: WAIT });
  expect(second.endedReason).toBe("budget_exhausted");
  expect(dear.requests).toHaveLength(1);
  // The same budget, asked on the cheap model: still spent.
  const resumed = await client.resume(id, {
    model: { provider: "openai", model: "gpt-cheap", baseUrl: cheap.url },
  });
  const run = await client.waitForRun(resumed.runId, { timeoutMs: WAIT });
  expect(cheap.requests).toHaveLength(0);
  expect(run.endedReason).toBe("budget_exhausted");
  expect(run.error).toMatch(/agent\.budget\.maxCostUsd: [\d.]+ of 0\.01 USD used/);
});

it("the agent's cheaper model after a resume on a dearer one finds the budget that resume spent", async () => {
  const { id } = await client.createSession({
    agent: {
      model: { provider: "openai", model: "gpt-cheap", baseUrl: cheapAgent.url },
      tools: ["sleep"],
      maxTurns: 1,
      budget: { maxCostUsd: 0.01 },
    },
  });
  // One cheap step (a tool call, its usage reported: nothing unreported), then max_turns.
  const first = await client.waitForRun((await client.send(id, "one")).runId, { timeoutMs: WAIT });
  expect(first.endedReason).toBe("max_turns");
  expect(cheapAgent.requests).toHaveLength(1);
  // A resume on the dear model: its step (usage unknown) spends the budget.
  const before = dear.requests.length;
  const resumed = await client.resume(id, {
    model: { provider: "openai", model: "gpt-dear", baseUrl: dear.url },
  });
  expect((await client.waitForRun(resumed.runId, { timeoutMs: WAIT })).endedReason).toBe("completed");
  expect(dear.requests).toHaveLength(before + 1);
  // A new message runs on the agent's cheap model: the budget is spent, nothing is called.
  const run = await client.waitForRun((await client.send(id, "two")).runId, { timeoutMs: WAIT });
  expect(cheapAgent.requests).toHaveLength(1);
  expect(run.endedReason).toBe("budget_exhausted");
});
