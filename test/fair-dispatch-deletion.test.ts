/**
 * Fair dispatch (contracts §10) and a tenant that deletes what it queued instead of cancelling
 * it: `DELETE /v1/batches/:id`, or its sessions one by one (`DELETE /v1/sessions/:id`). Its
 * queued runs end with the delete and it has nothing waiting, as after a cancel, which starts
 * its fair-dispatch entry over (cancel-cleanup.ts). A delete did not: the entry still stood
 * past the 30 runs the tenant no longer had, and its next session was queued behind the other
 * tenant's 30 waiting runs (31st of 31). Real API, Postgres and Redis; no worker, so every run
 * waits and the queue's order is all there is to read.
 */
import { Queue } from "bullmq";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { FleetClient } from "../src/producer/client.js";
import { ApiKeys } from "../src/shared/store/api-keys.js";
import { createFleetEnv, type FleetEnv } from "./support/fleet-env.js";

const AGENT = { model: { provider: "scripted" as const, steps: [{ text: "ok" }] } };

let fleet: FleetEnv;
let queue: Queue;
let baseUrl: string;
let keys: ApiKeys;

beforeAll(async () => {
  fleet = await createFleetEnv("fair-deletion");
  queue = new Queue("runs", { connection: fleet.redis, prefix: fleet.config.prefix });
  keys = new ApiKeys(fleet.database);
  baseUrl = (await fleet.startApi()).api.url;
}, 60_000);
afterAll(async () => {
  await queue?.close();
  await fleet?.close();
});

/**
 * Tenants `a<n>` and `b<n>` each queue 30 runs, `a<n>` deletes its own with `remove`, then
 * queues one more: where that one stands among the waiting jobs, and how many wait.
 */
async function rankAfterDelete(
  n: number,
  remove: (a: FleetClient, batch: { id: string; sessions: { id: string }[] }) => Promise<void>,
): Promise<{ waiting: number; rank: number }> {
  await queue.drain(true);
  const a = new FleetClient({ baseUrl, apiKey: (await keys.create(`a${n}`)).key });
  const b = new FleetClient({ baseUrl, apiKey: (await keys.create(`b${n}`)).key });
  const mine = await a.createBatch(Array.from({ length: 30 }, (_, i) => ({ agent: AGENT, input: `a ${i}` })));
  await b.createBatch(Array.from({ length: 30 }, (_, i) => ({ agent: AGENT, input: `b ${i}` })));
  await remove(a, mine);
  const { sessions } = await a.createBatch([{ agent: AGENT, input: "a again" }]);
  const waiting = await queue.getJobs(["prioritized"], 0, -1, true);
  return { waiting: waiting.length, rank: waiting.findIndex((job) => job.data.runId === sessions[0]!.runId) };
}

describe("a tenant that deleted what it queued, in the fair order", () => {
  it("is not put behind another tenant's backlog after deleting its batch", async () => {
    const { waiting, rank } = await rankAfterDelete(1, async (a, batch) => {
      await a.deleteBatch(batch.id);
    });
    expect(waiting).toBe(31);
    expect(rank).toBeLessThanOrEqual(1);
  }, 30_000);

  it("is not put behind another tenant's backlog after deleting its sessions one by one", async () => {
    const { waiting, rank } = await rankAfterDelete(2, async (a, batch) => {
      for (const session of batch.sessions) await a.deleteSession(session.id);
    });
    expect(waiting).toBe(31);
    expect(rank).toBeLessThanOrEqual(1);
  }, 30_000);
});
