/**
 * A session deleted while its run waits for its endpoint's capacity (provider-limits.ts):
 * a cancel forgets the run's waiting request (cancel-cleanup.ts afterCancel → waitsGone), a delete
 * did not, so its tenant went on counting as waiting, and kept a share of maxConcurrent for a
 * request that would never come, until maxWait after its place (for a handed-back backlog,
 * minutes). Real API, Postgres and Redis; the waiting request is made as a worker's gate
 * makes it.
 */
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import type { FleetClient } from "../src/producer/client.js";
import { ProviderLimits } from "../src/shared/provider-limits.js";
import { DEFAULT_TENANT } from "../src/shared/store/api-keys.js";
import { createFleetEnv, type FleetEnv } from "./support/fleet-env.js";

let fleet: FleetEnv;
let client: FleetClient;
beforeAll(async () => {
  fleet = await createFleetEnv("deletion-limits", {
    env: {
      FLEET_MODEL_ENDPOINTS: JSON.stringify({
        slow: { provider: "openai", baseUrl: "http://127.0.0.1:9", limits: { maxConcurrent: 1 } },
      }),
    },
  });
  ({ client } = await fleet.startApi());
});
afterAll(async () => {
  await fleet?.close();
});

describe("a session deleted while its run waits for capacity", () => {
  it("its tenant stops counting as waiting at once", async () => {
    // Places that stay counted for a minute, so only the delete can end them here.
    const limits = new ProviderLimits(fleet.redis, fleet.config.prefix, { maxWaitMs: 60_000 });
    const agent = { model: { provider: "openai" as const, endpoint: "slow", model: "gpt-test" } };
    const ask = (tenant: string, request: string) =>
      limits.acquire({
        endpoint: "slow",
        limits: { maxConcurrent: 1 },
        tenant,
        weight: 1,
        request,
        estimatedTokens: 1,
      });
    // Another tenant holds the one permit.
    expect((await ask("other", "holder")).granted).toBe(true);
    // Twice: each delete forgets its own run's request (the API keeps one forgetter).
    for (const round of [1, 2]) {
      const { id } = await client.createSession({ agent });
      const { runId } = await client.send(id, `wait for me ${round}`);
      // The run asks and waits (its worker hands it back).
      expect((await ask(DEFAULT_TENANT, runId)).granted).toBe(false);
      expect(await limits.waiting("slow")).toEqual(new Map([[DEFAULT_TENANT, 1]]));
      expect(await client.deleteSession(id)).toEqual({ id, deleted: true });
      // Before: still counted as waiting, for up to maxWait after its place.
      expect(await limits.waiting("slow")).toEqual(new Map());
    }
  }, 60_000);
});
