/**
 * The sweeper's second send of a cancel's stop (src/sweeper/cancelled-leftovers.ts), for a
 * cancel that found more runs running than one scan's page, against real Postgres: the runs
 * a cancel found running that still run were read as one page, the same first ones at every
 * scan, so the rest of a batch of thousands never had their stop sent again. The pages now
 * go round them all, a scan each: every run still running is sent its stop at every round
 * (one that never stops does not keep the others waiting), logged once, and a run that ended
 * is sent nothing more. test/cancel-redis-away.test.ts has the workers of a real fleet stop.
 */
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import type { FleetClient } from "../src/producer/client.js";
import { createMetrics } from "../src/shared/metrics.js";
import { RunQueues } from "../src/shared/queues.js";
import { cancelSessions } from "../src/shared/store/batch-cancel.js";
import { CancelledLeftovers } from "../src/sweeper/cancelled-leftovers.js";
import { SweepQueries } from "../src/sweeper/sweep-queries.js";
import { createFleetEnv, type FleetEnv } from "./support/fleet-env.js";

const agent = { model: { provider: "scripted" as const, steps: [{ text: "done" }] } };

describe("a cancel's stop sent again, for more runs than a page", () => {
  let fleet: FleetEnv;
  let client: FleetClient;
  let queues: RunQueues;

  beforeAll(async () => {
    fleet = await createFleetEnv("resignalpages");
    ({ client } = await fleet.startApi());
    queues = new RunQueues(fleet.redis, fleet.config.prefix);
  });
  afterAll(async () => {
    await queues?.close();
    await fleet?.close();
  });

  it("goes round every run the cancel found running, page by page, until they end", async () => {
    const { sql } = fleet.database;
    // No worker: the runs are queued, then marked running as a worker's start would.
    const batch = await client.createBatch(Array.from({ length: 5 }, () => ({ agent, input: "go" })));
    const ids = batch.sessions.map((s) => s.id);
    await sql`update runs set status = 'running', started_at = now() where session_id in ${sql(ids)}`;
    // The API's cancel with its signal lost (Redis away): nothing published.
    const cancel = await cancelSessions(fleet.database, "default", { batchId: batch.id });
    const running = cancel.running.map((r) => r.id).sort();
    expect(running).toHaveLength(5);
    // Older than the moment the cancel's own signal is given.
    await sql`update sessions set cancelled_at = now() - interval '10 seconds' where id in ${sql(ids)}`;

    const sent: string[][] = [];
    const warned: unknown[] = [];
    const leftovers = new CancelledLeftovers(
      {
        sweeps: new SweepQueries(fleet.database),
        queues,
        metrics: createMetrics("resignal-pages-test"),
        log: { warn: (fields: unknown) => warned.push(fields) },
        cancelSignal: async (_sessionIds, runIds) => {
          sent.push(runIds);
        },
      },
      5_000,
      2,
    );
    // Pages of 2: a round of 5 runs is three scans.
    const round = async () => {
      sent.length = 0;
      for (let page = 0; page < 3; page++) await leftovers.scan();
      return [...new Set(sent.flat())].sort();
    };
    expect(await round()).toEqual(running);
    // Still running: all of them again, not the first page only.
    expect(await round()).toEqual(running);
    // Logged once each, whatever the rounds.
    expect((warned as { runIds: string[] }[]).flatMap((w) => w.runIds).sort()).toEqual(running);

    // Two ended (their workers heard): the others are still sent theirs, those two nothing.
    const ended = running.slice(0, 2);
    await sql`update runs set status = 'ended', ended_reason = 'cancelled', ended_at = now()
               where id in ${sql(ended)}`;
    const rest = running.slice(2);
    expect(await round()).toEqual(rest);
    expect(await round()).toEqual(rest);
    expect((warned as { runIds: string[] }[]).flatMap((w) => w.runIds)).toHaveLength(5);
  });
});
