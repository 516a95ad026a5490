/**
 * A cancelled session's run left running by a worker that died (contracts §9: a cancel aborts
 * a running run, and the session ends `cancelled`), found by the next worker that claims the
 * session rather than by the sweeper: the dead worker's job, stalled in BullMQ, is taken again
 * once its lock lapses, which the sweeper beats only while it runs (FleetSweeperDown). The
 * claim ends the runs an earlier holder left running (grouped-claims.ts `stale`); it ended this
 * one `crashed`, counted it so in fleet_runs_total (the dashboard's "Crashed runs") and wrote
 * RUN_COMPLETED `crashed`, where the sweeper and the run's own worker end it `cancelled`
 * (sweep-queries.ts `endAbandonedRun`, cancel-reads.ts `endsCancelled`). The dead worker's run
 * is made on purpose (support/stalled-run.ts), the cancel is the API's statement with its
 * signal lost (support/lost-cancel.ts), and a real `fleet worker` takes the run's job.
 */
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { eventStreamKey } from "../src/shared/events.js";
import { RunQueues } from "../src/shared/queues.js";
import { claimsTogether } from "../src/shared/store/grouped-claims.js";
import { createFleetEnv, type FleetEnv, readyInfo, waitFor } from "./support/fleet-env.js";
import { cancelUnheard } from "./support/lost-cancel.js";
import { sampleValue } from "./support/metric-samples.js";
import { withDeadWorkersRun } from "./support/stalled-run.js";

let fleet: FleetEnv;
let queues: RunQueues;

beforeAll(async () => {
  fleet = await createFleetEnv("claim-cancelled-stale");
  queues = new RunQueues(fleet.redis, fleet.config.prefix);
}, 60_000);
afterAll(async () => {
  await queues?.close();
  await fleet?.close();
});

describe("a claim that finds a cancelled session's run left running", () => {
  it("ends it `cancelled`: stored, counted and its end event so; the session stays cancelled", async () => {
    await withDeadWorkersRun(fleet, async ({ sessionId, runStatus }) => {
      const [runId] = await cancelUnheard(fleet.database, sessionId);
      expect(runId).toBeDefined();
      // The dead worker's job, back in the queue as BullMQ's stalled-job check puts it.
      await queues.enqueue("run", { sessionId, runId: runId! });
      const worker = await fleet.spawnWorker();
      await waitFor(async () => (await runStatus()).status === "ended", 20_000, "the run ended");
      expect(await runStatus()).toEqual({ status: "ended", ended_reason: "cancelled" });

      // The claim's count and end event follow its commit (the worker makes them once the claim
      // answered, the count first): the end event is waited for, then both are read.
      const runEnds = async () =>
        (await fleet.redis.xrange(eventStreamKey(fleet.config.prefix, sessionId), "-", "+"))
          .map(([, fields]) => JSON.parse(fields[fields.indexOf("data") + 1]!) as Record<string, unknown>)
          .filter((event) => event.type === "RUN_COMPLETED")
          .map((event) => `${event.runId} ${event.outcome}`);
      await waitFor(async () => (await runEnds()).length > 0, 20_000, "the run's end event");
      expect(await runEnds()).toEqual([`${runId} cancelled`]);

      const metrics = await (await fetch(`http://127.0.0.1:${readyInfo(worker).metricsPort}/metrics`)).text();
      const counted = (outcome: string) =>
        sampleValue(metrics, "fleet_runs_total", { kind: "run", outcome, role: "worker" });
      expect({ cancelled: counted("cancelled"), crashed: counted("crashed") }).toEqual({
        cancelled: 1,
        crashed: 0,
      });

      const { sql } = fleet.database;
      const [session] = await sql<{ status: string }[]>`select status from sessions where id = ${sessionId}`;
      expect(session!.status).toBe("cancelled");
      expect(await sql`select id from runs where session_id = ${sessionId} and id <> ${runId!}`).toEqual([]);
    });
  }, 60_000);

  it("ends it `cancelled` in a grouped claim too, beside another session's run ended `crashed`", async () => {
    await withDeadWorkersRun(fleet, async (cancelled) => {
      await withDeadWorkersRun(fleet, async (crashed) => {
        const [runId] = await cancelUnheard(fleet.database, cancelled.sessionId);
        const claim = (sessionId: string) => ({
          sessionId,
          workerId: "w2",
          startFirst: false,
          tail: "awaiting_model",
        });
        const answers = await claimsTogether(fleet.database, [
          claim(cancelled.sessionId),
          claim(crashed.sessionId),
        ]);
        const stale = answers.map((a) => (a.locked && a.out ? a.out.stale : null));
        expect(stale.map((runs) => (typeof runs === "string" ? JSON.parse(runs) : runs))).toEqual([
          [{ id: runId, kind: "run", outcome: "cancelled" }],
          [{ id: expect.any(String), kind: "run", outcome: "crashed" }],
        ]);
        expect(await cancelled.runStatus()).toEqual({ status: "ended", ended_reason: "cancelled" });
        expect(await crashed.runStatus()).toEqual({ status: "ended", ended_reason: "crashed" });
      });
    });
  });
});
