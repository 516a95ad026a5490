/**
 * Tenant shares of an endpoint's maxConcurrent (contracts §15: one tenant's batch cannot take
 * all of an endpoint's capacity while another tenant waits), end to end: the in-process API,
 * three real `fleet worker` processes and a local OpenAI-compatible server that holds big's
 * answers until the test lets them go, so the test decides when a permit frees. Tenant big
 * queues 20 sessions on an endpoint declared `maxConcurrent: 2`; while both permits are held
 * and big's other requests wait, tenant small starts a session (three times, one after the
 * other), and once small's request is seen waiting, one permit frees (twice), then both at
 * once: the first permit that frees is small's, not whichever of big's waiting requests asks
 * first.
 */
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { FleetClient } from "../src/producer/client.js";
import { ProviderLimits } from "../src/shared/provider-limits.js";
import { ApiKeys } from "../src/shared/store/api-keys.js";
import { type FakeOpenAI, startFakeOpenAI } from "./support/fake-openai.js";
import { createFleetEnv, type FleetEnv, waitFor } from "./support/fleet-env.js";

const BIG_SESSIONS = 20;

describe("tenant shares of an endpoint's maxConcurrent across three workers", () => {
  let fleet: FleetEnv;
  let big: FleetClient;
  let small: FleetClient;
  let slow: FakeOpenAI;
  /** Which tenant's request arrived at the provider, in order. */
  const arrivals: ("big" | "small")[] = [];
  /** Lets go of big's answers held in flight, oldest first (small's are answered at once). */
  const held: (() => void)[] = [];
  let released = 0;
  const release = (count: number) => {
    for (const answer of held.splice(0, count)) answer();
    released += count;
  };

  beforeAll(async () => {
    slow = await startFakeOpenAI([], {
      respond: (body) => {
        const last = JSON.stringify(body?.messages?.at(-1) ?? "");
        const tenant: "big" | "small" = last.includes("small one") ? "small" : "big";
        arrivals.push(tenant);
        if (tenant === "small") return { text: ["done"] };
        return { text: ["done"], hold: new Promise((resolve) => held.push(() => resolve(undefined))) };
      },
    });
    fleet = await createFleetEnv("limitshares", {
      env: {
        FLEET_MODEL_ENDPOINTS: JSON.stringify({
          slow: { provider: "openai", baseUrl: slow.url, limits: { maxConcurrent: 2 } },
        }),
        WORKER_CONCURRENCY: "8",
      },
    });
    const keys = new ApiKeys(fleet.database);
    const { api } = await fleet.startApi();
    big = new FleetClient({ baseUrl: api.url, apiKey: (await keys.create("big")).key });
    small = new FleetClient({ baseUrl: api.url, apiKey: (await keys.create("small")).key });
    for (let i = 0; i < 3; i++) await fleet.spawnWorker();
  }, 90_000);
  afterAll(async () => {
    release(held.length);
    await fleet?.close();
    await slow?.close();
  });

  it("a permit that frees while small waits goes to small; no permit is kept idle for the batch", async () => {
    const agent = { model: { provider: "openai" as const, endpoint: "slow", model: "gpt-test" } };
    const limits = new ProviderLimits(fleet.redis, fleet.config.prefix);
    const batch = await big.createBatch(
      Array.from({ length: BIG_SESSIONS }, (_, i) => ({ agent, input: `big ${i}` })),
    );
    /** Both permits are big's, held, and more of big's requests wait for them. */
    const bigHoldsBoth = async () =>
      held.length === 2 && ((await limits.waiting("slow")).get("big") ?? 0) > 0;
    // Three times (one by luck is not enough): small starts a session while big's wait.
    for (let round = 0; round < 3; round++) {
      await waitFor(bigHoldsBoth, 60_000, `round ${round}: big holds both permits while its others wait`);
      const { sessions } = await small.createBatch([{ agent, input: `small one ${round}` }]);
      await waitFor(
        async () => (await limits.waiting("slow")).has("small"),
        60_000,
        `round ${round}: small's request waiting`,
      );
      // Nothing frees before the test lets it: a permit that frees now frees while small waits.
      // Rounds 0 and 1 free one; round 2 frees both together (they did, ±ms, in CI runs).
      const frees = round === 2 ? 2 : 1;
      const before = arrivals.length;
      release(frees);
      await waitFor(
        () => arrivals.length >= before + frees,
        60_000,
        `round ${round}: ${frees} requests sent`,
      );
      const next = arrivals.slice(before, before + frees);
      expect(next, `round ${round}: the requests sent once ${frees} freed`).toContain("small");
      const run = await small.waitForRun(sessions[0]!.runId!, { timeoutMs: 60_000 });
      expect(run.endedReason).toBe("completed");
      // Granted, it no longer counts as waiting: no permit is kept for it now.
      expect((await limits.waiting("slow")).has("small"), `round ${round}: small still counted`).toBe(false);
    }
    // The rest of the batch, two at a time: each time both permits are taken (none kept idle
    // for small, or for nobody, while big's requests wait), then both let go.
    while (released < BIG_SESSIONS) {
      const wave = Math.min(2, BIG_SESSIONS - released);
      await waitFor(() => held.length >= wave, 60_000, `big's next ${wave} requests in flight together`);
      release(wave);
    }
    const runs = await Promise.all(
      batch.sessions.map((s) => big.waitForRun(s.runId!, { timeoutMs: 60_000 })),
    );
    expect(runs.every((r) => r.endedReason === "completed")).toBe(true);
    expect(slow.stats.maxInFlight).toBe(2);
    expect(arrivals.filter((tenant) => tenant === "big")).toHaveLength(BIG_SESSIONS);
    expect(arrivals.filter((tenant) => tenant === "small")).toHaveLength(3);
  }, 240_000);
});
