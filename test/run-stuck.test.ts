/**
 * A run that is running while its worker is alive and renews its lease, but makes no progress:
 * a tool that never returns (and ignores its AbortSignal) on a real `fleet worker`, watched by
 * a real sweeper on real Postgres. The sweeper leaves it running (its worker is alive), and
 * exports its time since the session's last append (fleet_run_progress_age_seconds), counts
 * it stuck past FLEET_RUN_STUCK_AFTER_MS (fleet_runs_stuck) and logs it once. Before, nothing
 * showed such a run. And what the sweeper's read of it costs: one sessions_pkey entry per
 * running run.
 */
import { existsSync } from "node:fs";
import { join } from "node:path";
import pino from "pino";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import type { FleetClient } from "../src/producer/client.js";
import { loadConfig } from "../src/shared/config.js";
import { SweepQueries } from "../src/sweeper/sweep-queries.js";
import { type RunningSweeper, startSweeper } from "../src/sweeper/sweeper-process.js";
import {
  createFleetEnv,
  type FleetEnv,
  ROOT,
  readyInfo,
  type WorkerProcess,
  waitFor,
} from "./support/fleet-env.js";
import { readsWhile } from "./support/stat-reads.js";

const STUCK_LOG = "run making no progress";

describe("a run stuck in a tool while its worker lives", () => {
  let fleet: FleetEnv;
  let client: FleetClient;
  let worker: WorkerProcess;
  let sweeper: RunningSweeper;
  const logged: { msg: string; sessionId?: string; runId?: string; workerId?: string }[] = [];
  /** Liveness passes of the sweeper ended so far. */
  let passes = 0;

  beforeAll(async () => {
    fleet = await createFleetEnv("runstuck");
    client = (await fleet.startApi()).client;
    worker = await fleet.spawnWorker({}, ["--tools", join(ROOT, "test/fixtures/hanging-tool.ts")]);
    const logger = pino({ level: "warn" }, { write: (line: string) => void logged.push(JSON.parse(line)) });
    sweeper = await startSweeper(loadConfig(fleet.env), { serveMetrics: true, logger });
    const original = sweeper.sweeper.sweepWorkers;
    sweeper.sweeper.sweepWorkers = async function (this: typeof sweeper.sweeper) {
      const result = await original.call(this);
      passes++;
      return result;
    };
  }, 90_000);

  afterAll(async () => {
    await sweeper?.stop();
    await fleet?.close();
  });

  const metric = async (name: string): Promise<number | undefined> => {
    const text = await (await fetch(`http://127.0.0.1:${sweeper.metricsPort}/metrics`)).text();
    const match = new RegExp(`^${name}\\{[^}]*\\} (\\S+)$`, "m").exec(text);
    return match ? Number(match[1]) : undefined;
  };
  /** Resolves once `n` more liveness passes have ended (each reads the running runs). */
  const morePasses = async (n: number) => {
    const target = passes + n;
    await waitFor(() => passes >= target, 20_000, `${n} liveness passes of the sweeper`);
  };

  it("exports its time without progress, counts and logs it once past the threshold, leaves it running, and drops back once it is cancelled", async () => {
    // Every series there from the start, at 0, and the threshold at its default (30 min).
    expect(await metric("fleet_run_progress_age_seconds")).toBe(0);
    expect(await metric("fleet_runs_stuck")).toBe(0);
    expect(await metric("fleet_run_stuck_after_seconds")).toBe(1800);

    const steps = [{ toolCalls: [{ id: "h1", name: "hang", arguments: {} }] }, { text: "never reached" }];
    const { id } = await client.createSession({
      agent: { model: { provider: "scripted", steps }, tools: ["hang"] },
    });
    const { runId } = await client.send(id, "go");
    await waitFor(() => existsSync(join(fleet.env.FLEET_TOOL_DIR!, "hang-h1")), 30_000, "the tool running");
    await morePasses(2);
    // Running, just started: not stuck.
    expect(await metric("fleet_run_progress_age_seconds")).toBeLessThan(1800);
    expect(await metric("fleet_runs_stuck")).toBe(0);

    // An hour in the tool: its session's last append and the run's start an hour earlier (the
    // worker appends nothing while its tool hangs; its lease lives in Redis, not here).
    const { sql } = fleet.database;
    await sql`update sessions set last_active_at = last_active_at - interval '1 hour' where id = ${id}`;
    await sql`update runs set started_at = started_at - interval '1 hour' where id = ${runId}`;
    await waitFor(async () => (await metric("fleet_runs_stuck")) === 1, 20_000, "the run counted stuck");
    const age = (await metric("fleet_run_progress_age_seconds"))!;
    expect(age).toBeGreaterThan(3600);
    expect(age).toBeLessThan(3600 + 600);

    // Later passes: still stuck, still running on its live worker, logged once only.
    await morePasses(3);
    expect(await metric("fleet_runs_stuck")).toBe(1);
    const [run] = await sql<{ status: string; worker_id: string }[]>`
      select status, worker_id from runs where id = ${runId}`;
    expect(run).toEqual({ status: "running", worker_id: readyInfo(worker).workerId });
    const lines = logged.filter((line) => line.msg.startsWith(STUCK_LOG));
    expect(lines).toEqual([
      expect.objectContaining({ sessionId: id, runId, workerId: readyInfo(worker).workerId }),
    ]);

    // What frees it: a cancel (the tool, deaf to its signal, is no longer waited for).
    await client.cancelSession(id);
    expect((await client.waitForRun(runId, { timeoutMs: 30_000 })).endedReason).toBe("cancelled");
    await waitFor(
      async () =>
        (await metric("fleet_runs_stuck")) === 0 && (await metric("fleet_run_progress_age_seconds")) === 0,
      20_000,
      "the gauges back to 0",
    );
  }, 120_000);
});

describe("the sweeper's read of running runs' progress", () => {
  let fleet: FleetEnv;
  beforeAll(async () => {
    fleet = await createFleetEnv("runprogressreads");
  });
  afterAll(async () => {
    await fleet?.close();
  });

  it("reads one sessions_pkey entry per running run and no session row besides", async () => {
    const RUNNING = 30;
    const ENDED = 300;
    const { sql } = fleet.database;
    await sql`insert into sessions (id, agent, run_started, last_active_at)
      select 's-' || g, '{"model":{"provider":"scripted","steps":[{"text":"hi"}]}}'::jsonb, true,
             now() - g * interval '1 minute'
        from generate_series(1, ${RUNNING + ENDED}) g`;
    await sql`insert into runs (id, session_id, kind, trigger, status, started_at, ended_at, ended_reason)
      select 'r-' || g, 's-' || g, 'run', 'api',
             case when g <= ${RUNNING} then 'running' else 'ended' end,
             now() - interval '2 hours',
             case when g <= ${RUNNING} then null else now() end,
             case when g <= ${RUNNING} then null else 'completed' end
        from generate_series(1, ${RUNNING + ENDED}) g`;
    const sweeps = new SweepQueries(fleet.database);
    let running: Awaited<ReturnType<SweepQueries["runningRuns"]>> = [];
    const reads = await readsWhile(
      fleet.database,
      async () => {
        const [row] = await sql<{ index: string; seq: string }[]>`
          select (select coalesce(sum(idx_tup_read), 0) from pg_stat_user_indexes where relname = 'sessions') as index,
                 (select coalesce(seq_tup_read, 0) from pg_stat_user_tables where relname = 'sessions') as seq`;
        return { index: Number(row!.index), seq: Number(row!.seq) };
      },
      async () => {
        running = await sweeps.runningRuns();
      },
    );
    expect(reads).toEqual({ index: RUNNING, seq: 0 });
    expect(running).toHaveLength(RUNNING);
    // Each run's time since its session's last append (later than its start, 2 hours ago).
    for (const run of running) {
      const minutes = Number(run.session_id.slice(2));
      expect(run.progress_age_ms, run.id).toBeGreaterThanOrEqual(minutes * 60_000);
      expect(run.progress_age_ms, run.id).toBeLessThan((minutes + 1) * 60_000);
    }
  });
});
