/**
 * A run left queued on a cancelled session (a message that raced a cancel before the two were
 * ordered on the session's row: test/cancel-lock-order.test.ts) was never run nor ended: its
 * send had been answered 202, the resume point said `running` for ever, an explicit resume
 * was refused, its batch never ended. The sweeper's wide scan now ends such runs `cancelled`,
 * as the cancel would have (src/sweeper/cancelled-leftovers.ts): the state is made here on
 * purpose, with SQL, as the race left it.
 */
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import type { FleetClient } from "../src/producer/client.js";
import { EventWriter } from "../src/shared/event-writer.js";
import { eventStreamKey } from "../src/shared/events.js";
import { createMetrics } from "../src/shared/metrics.js";
import { QUEUES, RunQueues } from "../src/shared/queues.js";
import { CancelledLeftovers } from "../src/sweeper/cancelled-leftovers.js";
import { SweepQueries } from "../src/sweeper/sweep-queries.js";
import { createFleetEnv, type FleetEnv } from "./support/fleet-env.js";

const agent = { model: { provider: "scripted" as const, steps: [{ text: "done" }] } };

describe("queued runs left on cancelled sessions", () => {
  let fleet: FleetEnv;
  let client: FleetClient;
  let queues: RunQueues;

  beforeAll(async () => {
    fleet = await createFleetEnv("cancelleftover");
    ({ client } = await fleet.startApi());
    queues = new RunQueues(fleet.redis, fleet.config.prefix);
  });
  afterAll(async () => {
    await queues?.close();
    await fleet?.close();
  });

  it("are ended cancelled by the sweeper, with their event and without their jobs; others stay", async () => {
    const { sql } = fleet.database;
    // No worker: each send leaves a queued run with its job waiting.
    const sent = async () => {
      const { id } = await client.createSession({ agent });
      const { runId } = await client.send(id, "hello");
      return { id, runId };
    };
    const leftover = await sent();
    const fresh = await sent();
    const active = await sent();
    // As the race left them: the session cancelled over a run its cancel did not see.
    await sql`update sessions set status = 'cancelled', cancelled_at = now()
               where id in ${sql([leftover.id, fresh.id])}`;
    await sql`update runs set created_at = now() - interval '10 seconds'
               where id in ${sql([leftover.runId, active.runId])}`;
    expect(await client.resumePoint(leftover.id)).toMatchObject({ resumable: false, reason: "running" });

    const events = new EventWriter(fleet.redis, fleet.config.prefix);
    const metrics = createMetrics("leftovers-test");
    const warned: unknown[] = [];
    const leftovers = new CancelledLeftovers({
      sweeps: new SweepQueries(fleet.database),
      queues,
      metrics,
      log: { warn: (fields: unknown) => warned.push(fields) },
      runEnded: (sessionId, runId, outcome) =>
        events
          .writeAfterSync(fleet.database, sessionId, [{ type: "RUN_COMPLETED", runId, outcome }])
          .then(() => {}),
    });
    expect(await leftovers.scan()).toBe(1);
    expect(warned).toEqual([{ runIds: [leftover.runId] }]);

    const run = await client.getRun(leftover.runId);
    expect(run).toMatchObject({ status: "ended", endedReason: "cancelled" });
    expect((await client.getSession(leftover.id)).status).toBe("cancelled");
    expect(await client.resumePoint(leftover.id)).not.toMatchObject({ reason: "running" });
    const jobId = (r: { id: string; runId: string }) =>
      QUEUES.runs.jobId({ sessionId: r.id, runId: r.runId });
    expect(await queues.getJob("run", jobId(leftover))).toBeUndefined();
    const stream = await fleet.redis.xrange(eventStreamKey(fleet.config.prefix, leftover.id), "-", "+");
    const completed = stream.map(
      ([, fields]) => JSON.parse(fields[fields.indexOf("data") + 1]!) as Record<string, unknown>,
    );
    expect(completed.filter((e) => e.type === "RUN_COMPLETED")).toMatchObject([
      { runId: leftover.runId, outcome: "cancelled" },
    ]);
    expect(
      (await metrics.registry.getSingleMetricAsString("fleet_runs_total")).includes('outcome="cancelled"'),
    ).toBe(true);

    // A run queued on a cancelled session less than 5 s ago is left for a later scan (the same
    // margin as for orphans). An active session's queued run is the orphan scan's, not this one's.
    for (const left of [fresh, active]) {
      expect(await client.getRun(left.runId)).toMatchObject({ status: "queued" });
      expect(await queues.getJob("run", jobId(left))).toBeDefined();
    }
    // Run again: nothing more to end.
    expect(await leftovers.scan()).toBe(0);

    // Behind a backlog longer than a page: found within a few scans, a page read at a time.
    await sql`update runs set status = 'ended', ended_reason = 'cancelled' where id = ${fresh.runId}`;
    const many = await Promise.all(Array.from({ length: 5 }, sent));
    const late = await sent();
    await sql`update runs set created_at = now() - interval '9 seconds' where id in ${sql(many.map((r) => r.runId))}`;
    await sql`update runs set created_at = now() - interval '8 seconds' where id = ${late.runId}`;
    await sql`update sessions set status = 'cancelled', cancelled_at = now() where id = ${late.id}`;
    const paged = new CancelledLeftovers(
      { sweeps: new SweepQueries(fleet.database), queues, metrics, log: { warn() {} } },
      5_000,
      2,
    );
    const found: number[] = [];
    for (let scan = 0; scan < 5; scan++) found.push(await paged.scan());
    // Pages of 2: the active session's run and the first waiting one, two more, two more,
    // then the late one alone (the last page: the next scan starts from the oldest again).
    expect(found.reduce((a, b) => a + b, 0)).toBe(1);
    expect(found.slice(0, 4)).toEqual([0, 0, 0, 1]);
    expect(await client.getRun(late.runId)).toMatchObject({ status: "ended", endedReason: "cancelled" });
  }, 30_000);
});
