/**
 * The sweeper's second send of a delete's stop (src/sweeper/deleted-runs.ts), for a batch
 * deleted with more running sessions than one scan's page, against real Postgres and Redis:
 * the delete keeps every run it found running (`deleted_runs`), the pages go round them all,
 * a run whose session's lease is still held is sent its stop again at every round (logged
 * once), and one whose lease is gone is forgotten. test/delete-redis-away.test.ts has the
 * workers of a real fleet stop on it.
 */
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import type { FleetClient } from "../src/producer/client.js";
import { SessionLease } from "../src/shared/lease.js";
import { DataDeletion } from "../src/shared/store/data-deletion.js";
import { DeletedRuns } from "../src/shared/store/deleted-runs.js";
import { DeletedRunStops, stopsToSend } from "../src/sweeper/deleted-runs.js";
import { createFleetEnv, type FleetEnv } from "./support/fleet-env.js";

const agent = { model: { provider: "scripted" as const, steps: [{ text: "done" }] } };

describe("stops of deleted runs sent again", () => {
  let fleet: FleetEnv;
  let client: FleetClient;

  beforeAll(async () => {
    fleet = await createFleetEnv("deletedrunstops");
    ({ client } = await fleet.startApi());
  });
  afterAll(() => fleet?.close());

  it("stopsToSend: a held lease is stopped again, a free one forgotten", () => {
    const runs = [
      { runId: "r1", sessionId: "a" },
      { runId: "r2", sessionId: "b" },
      { runId: "r3", sessionId: "a" },
    ];
    const holders = new Map([
      ["a", "w1/t"],
      ["b", null],
    ]);
    expect(stopsToSend(runs, holders)).toEqual({ stop: [runs[0], runs[2]], forget: ["r2"] });
  });

  it("go round a batch's runs page by page, until their leases are released", async () => {
    const { sql } = fleet.database;
    // No worker: the runs are queued, then marked running as a worker's start would.
    const batch = await client.createBatch(Array.from({ length: 7 }, () => ({ agent, input: "go" })));
    const ids = batch.sessions.map((s) => s.id);
    await sql`update runs set status = 'running', started_at = now() where session_id in ${sql(ids)}`;
    const runIds = new Map(
      (
        await sql<{ id: string; session_id: string }[]>`select id, session_id from runs
        where session_id in ${sql(ids)}`
      ).map((r) => [r.session_id, r.id]),
    );
    const lease = new SessionLease(fleet.redis, fleet.config.prefix, 60_000);
    const held = ids.slice(0, 5);
    const tokens = await Promise.all(held.map((id) => lease.acquire(id, "w")));

    const store = new DataDeletion(fleet.database);
    expect(await store.markBatchDeleted("default", batch.id)).toHaveLength(7);
    expect((await store.purgeBatchChunk(batch.id, 200)).done).toBe(true);
    expect(await sql`select 1 from deleted_runs where session_id in ${sql(ids)}`).toHaveLength(7);
    // Older than the moment the delete's own signal is given.
    await sql`update deleted_runs set deleted_at = now() - interval '10 seconds'`;

    const sent: string[][] = [];
    const warned: unknown[] = [];
    const stops = new DeletedRunStops(
      {
        runs: new DeletedRuns(fleet.database),
        holders: (sessionIds) => lease.holders(sessionIds),
        stopSignal: async (_sessionIds, runs) => {
          sent.push(runs);
        },
        log: { warn: (fields: unknown) => warned.push(fields) },
      },
      3,
    );
    const round = async () => {
      sent.length = 0;
      for (let page = 0; page < 3; page++) await stops.scan();
      return [...new Set(sent.flat())].sort();
    };
    const heldRuns = held.map((id) => runIds.get(id)!).sort();
    expect(await round()).toEqual(heldRuns);
    expect(await round()).toEqual(heldRuns);
    // Logged once each, whatever the rounds.
    expect((warned as { runIds: string[] }[]).flatMap((w) => w.runIds).sort()).toEqual(heldRuns);
    const left = await sql<{ run_id: string }[]>`select run_id from deleted_runs order by run_id`;
    expect(left.map((r) => r.run_id)).toEqual(heldRuns);

    // Their jobs ended: nothing more is sent, and nothing is kept.
    await Promise.all(held.map((id, i) => lease.release(id, tokens[i]!)));
    expect(await round()).toEqual([]);
    expect(await sql`select 1 from deleted_runs`).toHaveLength(0);
  });
});
