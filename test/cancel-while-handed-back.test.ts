/**
 * A session cancelled while its worker hands its run back for capacity (contracts §9, §15).
 * A cancel ends queued runs and tells workers to abort running ones; a run whose request
 * was just refused by its endpoint's limits is between the two. It was lost both ways:
 * - the abort arrived while the gate asked: the run ended `cancelled`, but its refused request
 *   went on counting as waiting for its tenant (until maxWait after its place: here 20 s and
 *   more), holding a share of the endpoint's permits for nothing — what made
 *   provider-limits-waiters fail in CI ("other waits no more");
 * - the abort arrived after (or never: the worker missed it): the run was handed back, queued
 *   on the cancelled session, and went on when its job came back, calling the model again.
 * Now the hand-back refuses a cancelled session (the run ends `cancelled`) and a run that ends
 * with a refused request forgets it. Real API, worker (in this process, so the test can act
 * between the gate's refusal and the hand-back), Postgres and Redis.
 */
import { afterAll, afterEach, beforeAll, describe, expect, it, vi } from "vitest";
import type { FleetClient } from "../src/producer/client.js";
import { type Acquired, ProviderLimits } from "../src/shared/provider-limits.js";
import { DEFAULT_TENANT } from "../src/shared/store/api-keys.js";
import { BatchStore } from "../src/shared/store/batches.js";
import { type RunningWorker, startWorker } from "../src/worker/worker.js";
import { type FakeOpenAI, startFakeOpenAI } from "./support/fake-openai.js";
import { createFleetEnv, type FleetEnv, waitFor } from "./support/fleet-env.js";

let fleet: FleetEnv;
let client: FleetClient;
let model: FakeOpenAI;
let worker: RunningWorker;
const acquire = ProviderLimits.prototype.acquire;

beforeAll(async () => {
  model = await startFakeOpenAI([{ text: ["should never be asked"] }]);
  fleet = await createFleetEnv("cancel-handed-back", {
    env: {
      // An endpoint for each case.
      FLEET_MODEL_ENDPOINTS: JSON.stringify({
        aborted: { provider: "openai", baseUrl: model.url, limits: { maxConcurrent: 1 } },
        missed: { provider: "openai", baseUrl: model.url, limits: { maxConcurrent: 1 } },
      }),
      // A refused request counts as waiting until 20 s after its place: only a forget ends it here.
      FLEET_ENDPOINT_MAX_WAIT_MS: "20000",
      FLEET_ENDPOINT_PERMIT_TTL_MS: "60000",
    },
  });
  ({ client } = await fleet.startApi());
  worker = await startWorker({ ...fleet.config, logLevel: "silent" }, { serveMetrics: false });
}, 60_000);
afterEach(() => {
  vi.restoreAllMocks();
});
afterAll(async () => {
  await worker?.stop();
  await fleet?.close();
  await model?.close();
});

describe("a session cancelled while its run is refused capacity", () => {
  const cases = [
    // The API's cancel: the abort reaches the worker while its gate still asks.
    {
      endpoint: "aborted",
      how: "the abort arrives while the gate asks",
      cancel: (id: string) => client.cancelSession(id),
    },
    // The cancel's write alone: the worker hears of it only from Postgres, at the hand-back.
    {
      endpoint: "missed",
      how: "the worker never hears the abort",
      cancel: (id: string) => new BatchStore(fleet.database).cancel(DEFAULT_TENANT, { sessionId: id }),
    },
  ];
  for (const { endpoint, how, cancel } of cases)
    it(`${how}: the run ends cancelled, its request waits no more, the model is never asked`, async () => {
      const limits = new ProviderLimits(fleet.redis, fleet.config.prefix, { permitTtlMs: 60_000 });
      // Another tenant holds the endpoint's one permit throughout.
      const holder = await acquire.call(limits, {
        endpoint,
        limits: { maxConcurrent: 1 },
        tenant: "other",
        weight: 1,
        request: `holder-${how}`,
        estimatedTokens: 1,
      });
      expect(holder.granted).toBe(true);
      let sessionId = "";
      let cancelled = false;
      vi.spyOn(ProviderLimits.prototype, "acquire").mockImplementation(async function (
        this: ProviderLimits,
        input,
      ): Promise<Acquired> {
        const asked = await acquire.call(this, input);
        if (asked.granted || cancelled) return asked;
        // Refused, and counted as waiting: the session is cancelled before the gate goes on.
        expect(await limits.waiting(endpoint)).toEqual(new Map([[DEFAULT_TENANT, 1]]));
        cancelled = true;
        await cancel(sessionId);
        await new Promise((r) => setTimeout(r, 300));
        // A place further than the gate waits: the run is to be handed back.
        return { granted: false, retryInMs: 30_000, reason: "concurrency" };
      });
      const agent = { model: { provider: "openai" as const, endpoint, model: "gpt-test" } };
      sessionId = (await client.createSession({ agent })).id;
      const { runId } = await client.send(sessionId, "wait for a permit");
      const run = await client.waitForRun(runId, { timeoutMs: 15_000 });
      expect(cancelled).toBe(true);
      expect(run).toMatchObject({ status: "ended", endedReason: "cancelled" });
      // The request was forgotten as the run ended: no tenant counts as waiting.
      expect(await limits.waiting(endpoint)).toEqual(new Map());
      expect((await client.getSession(sessionId)).status).toBe("cancelled");
      // Nothing of the run goes on: no job left, the model never asked.
      await waitFor(
        async () => {
          const [row] = await fleet.database.sql<{ n: number }[]>`
            select count(*)::int as n from runs where session_id = ${sessionId} and status <> 'ended'`;
          return row!.n === 0;
        },
        5_000,
        "no run left",
      );
      await new Promise((r) => setTimeout(r, 500));
      expect(model.stats.accepted).toEqual([]);
    }, 30_000);
});
