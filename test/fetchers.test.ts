/**
 * A queue's slots spread over several BullMQ Workers (src/worker/fetchers.ts): the split is
 * exact, and a real worker process with WORKER_CONCURRENCY=7 over 3 fetchers (3 + 2 + 2
 * slots) has three Workers on the queue, runs 7 sessions at once — never more — and
 * finishes every one.
 */
import { Queue } from "bullmq";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import type { FleetClient } from "../src/producer/client.js";
import { QUEUES } from "../src/shared/queues.js";
import { defaultFetchers, fetcherSlots } from "../src/worker/fetchers.js";
import { createFleetEnv, type FleetEnv, waitFor } from "./support/fleet-env.js";

describe("fetcherSlots / defaultFetchers", () => {
  it("splits the slots as evenly as whole numbers allow, summing to the concurrency", () => {
    expect(fetcherSlots(1000, 4)).toEqual([250, 250, 250, 250]);
    expect(fetcherSlots(10, 4)).toEqual([3, 3, 2, 2]);
    expect(fetcherSlots(2, 4)).toEqual([1, 1]);
    expect(fetcherSlots(8, 1)).toEqual([8]);
    for (let c = 1; c <= 300; c += 7)
      for (let f = 1; f <= 9; f++) {
        const slots = fetcherSlots(c, f);
        expect(slots.reduce((a, b) => a + b, 0)).toBe(c);
        expect(Math.min(...slots)).toBeGreaterThanOrEqual(1);
        expect(Math.max(...slots) - Math.min(...slots)).toBeLessThanOrEqual(1);
      }
    expect(() => fetcherSlots(0, 1)).toThrow(RangeError);
    expect(() => fetcherSlots(5, 0)).toThrow(RangeError);
  });

  it("uses one fetcher up to 250 slots, then one per 250, at most 4", () => {
    expect([1, 8, 250, 251, 500, 1000, 1001, 5000].map(defaultFetchers)).toEqual([1, 1, 1, 2, 2, 4, 4, 4]);
  });
});

describe("a worker with 7 slots over 3 fetchers", () => {
  let fleet: FleetEnv;
  let client: FleetClient;

  beforeAll(async () => {
    fleet = await createFleetEnv("fetchers");
    ({ client } = await fleet.startApi());
  });
  afterAll(async () => {
    await fleet?.close();
  });

  it("has three Workers on the queue, runs exactly 7 sessions at once and finishes all 16", async () => {
    const ids: string[] = [];
    for (let i = 0; i < 16; i++) {
      const { id } = await client.createSession({
        agent: {
          model: {
            provider: "scripted",
            steps: [
              { toolCalls: [{ id: "nap", name: "sleep", arguments: { ms: 700 } }] },
              { text: "rested" },
            ],
          },
          tools: ["sleep"],
        },
      });
      await client.send(id, "Rest a while.");
      ids.push(id);
    }
    // Every job is waiting before the worker starts, so all its fetchers find work at once.
    await fleet.spawnWorker({ WORKER_CONCURRENCY: "7", WORKER_FETCHERS: "3" });
    // BullMQ names each Worker's blocking connection after its queue.
    const runs = new Queue(QUEUES.runs.name, { connection: fleet.redis, prefix: fleet.config.prefix });
    try {
      expect(await runs.getWorkersCount()).toBe(3);
    } finally {
      await runs.close();
    }
    const { sql } = fleet.database;
    await waitFor(
      async () =>
        (
          await sql`select count(*)::int as n from runs where status = 'ended' and ended_reason = 'completed'`
        )[0]!.n === 16,
      30_000,
      "16 runs completed",
    );
    // The most runs that were running at one moment: at a run's start, those started and not ended.
    const [overlap] = await sql<{ most: number }[]>`
      select max((select count(*) from runs b where b.started_at <= a.started_at and b.ended_at > a.started_at))::int as most
        from runs a`;
    expect(overlap?.most).toBe(7);
    expect(ids).toHaveLength(16);
  }, 60_000);
});
