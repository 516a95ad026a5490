/**
 * The sweeper's liveness check does not wait for its wide scans. Its tick ran the two one
 * after the other, and skipped while the last was still running: a wide-scan statement that
 * took long (a plan Postgres made for empty tables held one for over 15 minutes on a first
 * batch of 10,000) held up the check that finds dead workers, so a SIGKILLed worker's
 * sessions waited with it. Here a wide scan is held on purpose — an expired idempotency key
 * whose row another transaction has locked, which the scan's prune waits for — while a worker
 * is killed mid-tool.
 */
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import type { FleetClient } from "../src/producer/client.js";
import { loadConfig } from "../src/shared/config.js";
import { type RunningSweeper, startSweeper } from "../src/sweeper/sweeper-process.js";
import { createFleetEnv, type FleetEnv, readyInfo, waitFor } from "./support/fleet-env.js";
import { startSleepySessions, untilCompleted, untilInsideTheSleep } from "./support/sleepy-sessions.js";
import { type HeldKey, holdExpiredKeyLocked } from "./support/sweeps.js";

describe("a wide scan held up in Postgres", () => {
  let fleet: FleetEnv;
  let client: FleetClient;
  let sweeper: RunningSweeper | undefined;
  let held: HeldKey | undefined;

  beforeAll(async () => {
    fleet = await createFleetEnv("sweeperpasses");
    ({ client } = await fleet.startApi());
  });
  afterAll(async () => {
    held?.release();
    await held?.done.catch(() => {});
    await sweeper?.stop();
    await fleet?.close();
  });

  it("does not hold up the liveness check: a killed worker's sessions are resumed meanwhile", async () => {
    const { sql } = fleet.database;
    held = await holdExpiredKeyLocked(sql);
    sweeper = await startSweeper({ ...loadConfig(fleet.env), logLevel: "silent" }, { serveMetrics: false });
    // The first wide scan prunes expired keys, and waits for the locked one.
    await waitFor(
      async () => {
        const [row] = await sql<{ n: number }[]>`
          select count(*)::int as n from pg_stat_activity
           where datname = current_database() and wait_event_type = 'Lock'
             and query like '%delete from idempotency_keys%'`;
        return row!.n === 1;
      },
      20_000,
      "the wide scan waiting for the locked row",
    );

    const env = { WORKER_CONCURRENCY: "4" };
    const [victim] = await Promise.all([fleet.spawnWorker(env), fleet.spawnWorker(env)]);
    const victimId = readyInfo(victim).workerId;
    const ids = await startSleepySessions(client, 4, { file: "log", sleepMs: 3_000 });
    await untilInsideTheSleep(fleet.database, ids.length);
    const onVictim = await sql<{ session_id: string }[]>`
      select session_id from runs where kind = 'run' and status = 'running' and worker_id = ${victimId}`;
    expect(onVictim.length).toBeGreaterThan(0);
    victim.child.kill("SIGKILL");
    await victim.exited;

    await untilCompleted(fleet.database, ids.length);
    for (const { session_id } of onVictim) {
      const session = await client.getSession(session_id);
      // Resumed by the sweeper's liveness check, not later by BullMQ finding the job stalled
      // (its lock lapsed) and the next claim on a survivor (trigger `worker`, 15 s later).
      expect(session.runs.map((r) => [r.kind, r.endedReason, r.trigger])).toEqual([
        ["run", "crashed", "api"],
        ["resume", "completed", "sweeper"],
      ]);
    }
    // The wide scan was still waiting all along.
    const [waiting] = await sql<{ n: number }[]>`
      select count(*)::int as n from pg_stat_activity
       where datname = current_database() and wait_event_type = 'Lock'
         and query like '%delete from idempotency_keys%'`;
    expect(waiting!.n).toBe(1);
  }, 90_000);
});
