/**
 * A cancelled session's run left running by its worker (contracts §9: a cancel aborts a running
 * run, and the session ends `cancelled`), when that worker froze or died before it ended the run:
 * the cancel's signal reached nobody, and the sweeper is the one to end it. A worker that ends
 * such a run ends it `cancelled` (fenced-runs.ts `endRun`, grouped-appends.ts `endsCancelled`);
 * the sweeper's ending statement (sweep-queries.ts `endAbandonedRun`) ended it `stalled` or
 * `crashed`, so an operator reading fleet_runs_total saw a cancelled run as a fault. The crash
 * state is made on purpose (support/stalled-run.ts: a run row running for three lease TTLs, its
 * worker's connection listed, no lease), the session cancelled by the API's own statement with
 * its signal lost (support/lost-cancel.ts). Real Postgres and Redis, the sweeper in this process.
 */
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { createMetrics } from "../src/shared/metrics.js";
import { RunQueues } from "../src/shared/queues.js";
import { createFleetEnv, type FleetEnv } from "./support/fleet-env.js";
import { cancelUnheard } from "./support/lost-cancel.js";
import { runsCounted } from "./support/metric-samples.js";
import { sweeperOf, withDeadWorkersRun, withFrozenWorkersRun } from "./support/stalled-run.js";

let fleet: FleetEnv;
let queues: RunQueues;

beforeAll(async () => {
  fleet = await createFleetEnv("sweeper-cancelled-abandoned");
  queues = new RunQueues(fleet.redis, fleet.config.prefix);
}, 60_000);
afterAll(async () => {
  await queues?.close();
  await fleet?.close();
});

describe("a cancelled session's run whose worker is gone", () => {
  it.each([
    ["froze (the run would end `stalled`)", withFrozenWorkersRun, 1],
    // The first look finds the worker missing, the second, past confirmDeathMs, dead.
    ["died (the run would end `crashed`)", withDeadWorkersRun, 2],
  ] as const)(
    "whose worker %s is ended `cancelled` by the sweeper: stored, counted and its end event so; nothing resumed",
    async (_case, withRun, looks) => {
      const metrics = createMetrics("sweeper-test");
      const ends: string[] = [];
      const sweeper = sweeperOf(fleet, queues, {
        metrics,
        runEnded: async (_sessionId, runId, outcome) => void ends.push(`${runId} ${outcome}`),
      });
      await withRun(fleet, async ({ sessionId, runStatus }) => {
        const [runId] = await cancelUnheard(fleet.database, sessionId);
        expect(runId).toBeDefined();
        for (let look = 1; look < looks; look++) {
          expect(await sweeper.sweepAbandoned()).toBe(0);
          await new Promise((resolve) => setTimeout(resolve, 200));
        }
        expect(await sweeper.sweepAbandoned()).toBe(1);
        expect(await runStatus()).toEqual({ status: "ended", ended_reason: "cancelled" });
        expect(await runsCounted(metrics.registry)).toEqual({ "run|cancelled": 1 });
        expect(ends).toEqual([`${runId} cancelled`]);
        const { sql } = fleet.database;
        const [session] = await sql<
          { status: string }[]
        >`select status from sessions where id = ${sessionId}`;
        expect(session!.status).toBe("cancelled");
        expect(await sql`select id from runs where session_id = ${sessionId} and id <> ${runId!}`).toEqual(
          [],
        );
      });
    },
  );
});
