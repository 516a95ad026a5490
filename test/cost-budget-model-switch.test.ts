/**
 * `agent.budget.maxCostUsd` when the session goes on with a cheaper model (README "Budget":
 * estimates of steps with unknown usage count at the session's later claims, so a provider that
 * never reports usage cannot spend past maxCostUsd one run at a time). Those estimates are kept
 * only as tokens (the session's `tokens_used`), priced again at each claim — at the price of the
 * model the claim runs: a resume on a cheaper model (`POST …/resume {"model"}`, or a fallback
 * the worker turns to) priced what the expensive model had spent at the cheap one's price, and
 * the budget was all but whole again.
 *
 * A real `fleet worker` and an OpenAI-compatible server that streams no usage chunk. The
 * agent's model costs 10,000 USD per million tokens: its one step (about 0.2 USD estimated)
 * spends the budget of 0.01 USD and the session is parked `budget_exhausted`. A resume asking
 * for a model at 0.000001 USD per million must find the budget spent and call nothing.
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

beforeAll(async () => {
  dear = await startFakeOpenAI([], { respond: () => ({ text: ["dear"], usage: null }) });
  cheap = await startFakeOpenAI([], { respond: () => ({ text: ["cheap"], usage: null }) });
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
