/**
 * `agent.budget.maxCostUsd` across runs when the provider reports no usage (README "Prices and
 * cost", contracts §12 "Limits that always hold"): a step with unknown usage counts an estimate,
 * and that estimate must still count once the session is claimed again — by the next run, or by
 * an automatic resume. Before, only stored `costUsd` was summed at a claim, so a model that
 * reports no usage (many OpenAI-compatible servers) never reached `maxCostUsd`: every new
 * message got a fresh budget, and the provider was called without bound.
 *
 * A real `fleet worker` and an OpenAI-compatible server that streams no usage chunk. At 0.01 USD
 * per token a step of this session is estimated at about 0.2 USD, so `maxCostUsd: 0.3` allows
 * the first two messages' calls (0 then ~0.2 spent before each) and no third.
 */
import { afterAll, beforeAll, expect, it } from "vitest";
import type { FleetClient } from "../src/producer/client.js";
import { type FakeOpenAI, startFakeOpenAI } from "./support/fake-openai.js";
import { createFleetEnv, type FleetEnv } from "./support/fleet-env.js";

const WAIT = 60_000;
let fleet: FleetEnv;
let client: FleetClient;
let fake: FakeOpenAI;

beforeAll(async () => {
  fake = await startFakeOpenAI([], { respond: () => ({ text: ["done"], usage: null }) });
  fleet = await createFleetEnv("costbudgetclaims", {
    env: {
      FLEET_ALLOWED_BASE_URLS: "http://127.0.0.1",
      FLEET_PRICES: JSON.stringify({ "openai:gpt-nousage": { input: 10_000, output: 10_000 } }),
    },
  });
  client = (await fleet.startApi()).client;
  await fleet.spawnWorker();
}, 90_000);

afterAll(async () => {
  await fleet?.close();
  await fake?.close();
});

it("a step with unknown usage still counts against maxCostUsd in the session's later runs", async () => {
  const { id } = await client.createSession({
    agent: {
      model: { provider: "openai", model: "gpt-nousage", baseUrl: fake.url },
      budget: { maxCostUsd: 0.3 },
    },
  });
  const outcomes: (string | null)[] = [];
  for (const text of ["one", "two", "three", "four"]) {
    const run = await client.waitForRun((await client.send(id, text)).runId, { timeoutMs: WAIT });
    outcomes.push(run.endedReason);
    if (run.endedReason === "budget_exhausted") {
      expect(run.error).toMatch(/agent\.budget\.maxCostUsd: [\d.]+ of 0\.3 USD used/);
      break;
    }
  }
  expect(outcomes).toEqual(["completed", "completed", "budget_exhausted"]);
  expect(fake.requests).toHaveLength(2);
  const session = await client.getSession(id);
  expect(session.status).toBe("parked");
  expect(session.parkedReason).toMatch(/^budget_exhausted: agent\.budget\.maxCostUsd/);
});
