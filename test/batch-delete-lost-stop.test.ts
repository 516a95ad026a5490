/**
 * A batch delete whose mark committed while Redis was away, and whose sessions could not be
 * deleted yet (the purge failed: Postgres lost mid-way, the API stopped after the mark, or the
 * rows stayed locked past the API's budget; the sweeper's retention finishes it, a minute later
 * by default). The mark cancels the batch's sessions and tells their workers with one publish
 * (deletion-cleanup.ts `afterBatchMarked`), lost here. The sweeper sends a lost stop again for
 * the runs a cancel found running (`cancelled_runs`, cancelled-leftovers.ts) and for those a
 * delete found running (`deleted_runs`, deleted-runs.ts), but the mark recorded its runs in
 * neither: until the purge, a worker running a tool for the batch ran it on, its lease renewed.
 * Now the mark records them as a cancel does, and the sweeper's next scans stop them.
 */

import type { Redis } from "ioredis";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import type { FleetClient } from "../src/producer/client.js";
import { Deletions } from "../src/producer/deletions.js";
import { DeletionCleanup } from "../src/shared/deletion-cleanup.js";
import { SessionLease } from "../src/shared/lease.js";
import { createMetrics } from "../src/shared/metrics.js";
import { RunQueues } from "../src/shared/queues.js";
import { CANCELLED_WHILE_RUNNING_PREFIX } from "../src/shared/resume-plan.js";
import { DataDeletion } from "../src/shared/store/data-deletion.js";
import { DeletedRuns } from "../src/shared/store/deleted-runs.js";
import { publishCancel } from "../src/shared/worker-signals.js";
import { CancelledLeftovers } from "../src/sweeper/cancelled-leftovers.js";
import { DeletedRunStops } from "../src/sweeper/deleted-runs.js";
import { SweepQueries } from "../src/sweeper/sweep-queries.js";
import { createFleetEnv, type FleetEnv, waitFor } from "./support/fleet-env.js";

/** A sleep far longer than the test waits for the run's end. */
const AGENT = {
  model: {
    provider: "scripted" as const,
    steps: [{ toolCalls: [{ id: "nap", name: "sleep", arguments: { ms: 120_000 } }] }, { text: "done" }],
  },
  tools: ["sleep"],
};

/** Redis away, for the API's clean-up: every command fails, as on a closed connection. */
const redisAway = new Proxy(
  {},
  { get: () => () => Promise.reject(new Error("Connection is closed.")) },
) as unknown as Redis;

describe("a batch delete whose stop was lost and whose sessions are not purged yet", () => {
  let fleet: FleetEnv;
  let client: FleetClient;
  let queues: RunQueues;

  beforeAll(async () => {
    fleet = await createFleetEnv("batchdeletelost");
    ({ client } = await fleet.startApi());
    queues = new RunQueues(fleet.redis, fleet.config.prefix);
    await fleet.spawnWorker();
  }, 90_000);
  afterAll(async () => {
    await queues?.close();
    await fleet?.close();
  });

  it("has its running tools stopped by the sweeper's second send", async () => {
    const { sql } = fleet.database;
    const batch = await client.createBatch([
      { agent: AGENT, input: "a" },
      { agent: AGENT, input: "b" },
    ]);
    const ids = batch.sessions.map((s) => s.id);
    await waitFor(
      async () =>
        (await sql`select 1 from messages where session_id in ${sql(ids)} and role = 'assistant'`).length ===
        2,
      30_000,
      "both sleep calls committed",
    );
    const store = new DataDeletion(fleet.database);
    const deletions = new Deletions({
      store: {
        markBatchDeleted: (tenant: string, batchId: string) => store.markBatchDeleted(tenant, batchId),
        deleteSession: async () => null,
        // The purge does not get far (Postgres lost mid-way): the sessions are still there.
        purgeBatchChunk: async () => {
          throw new Error("Connection terminated unexpectedly");
        },
      },
      cleanup: new DeletionCleanup({
        redis: redisAway,
        prefix: fleet.config.prefix,
        removeJob: async () => {},
        metrics: { sessionsDeleted: { inc: () => {} } },
        eventsEnabled: true,
      }),
    });
    expect(await deletions.deleteBatch("default", batch.id)).toMatchObject({ complete: false });

    // The sweeper's wide-scan steps that send lost stops again, with Redis back.
    const stop = (sessionIds: string[], runIds: string[]) =>
      publishCancel(fleet.redis, fleet.config.prefix, sessionIds, runIds);
    const warned: unknown[] = [];
    const log = { warn: (fields: unknown) => warned.push(fields) };
    const leftovers = new CancelledLeftovers({
      sweeps: new SweepQueries(fleet.database),
      queues,
      metrics: createMetrics("batch-delete-lost-test"),
      log,
      cancelSignal: stop,
    });
    const lease = new SessionLease(fleet.redis, fleet.config.prefix, fleet.config.leaseTtlMs);
    const deletedRuns = new DeletedRunStops({
      runs: new DeletedRuns(fleet.database),
      holders: (sessionIds) => lease.holders(sessionIds),
      stopSignal: stop,
      log,
    });
    await waitFor(
      async () => {
        await leftovers.scan();
        await deletedRuns.scan();
        await new Promise((resolve) => setTimeout(resolve, 250));
        const [row] = await sql<{ n: number }[]>`select count(*)::int as n from runs
          where session_id in ${sql(ids)} and status = 'ended'`;
        return row!.n === 2;
      },
      30_000,
      "both runs ended (their 120 s sleeps aborted by the sweeper's second send)",
    );
    expect(warned).toHaveLength(1);
    const runs = await sql<{ ended_reason: string }[]>`select ended_reason from runs
      where session_id in ${sql(ids)}`;
    expect(runs.map((r) => r.ended_reason)).toEqual(["cancelled", "cancelled"]);
    const tools = await sql<{ content: string }[]>`select content from messages
      where session_id in ${sql(ids)} and role = 'tool'`;
    expect(tools).toHaveLength(2);
    for (const tool of tools) expect(tool.content).toMatch(new RegExp(`^${CANCELLED_WHILE_RUNNING_PREFIX}`));

    // The purge, once it runs, finds nothing running: nothing is kept for a second send.
    expect((await store.purgeBatchChunk(batch.id, 200)).done).toBe(true);
    expect(await sql`select 1 from deleted_runs where session_id in ${sql(ids)}`).toHaveLength(0);
  }, 120_000);
});
