/**
 * Several sweepers at once, and a sweeper racing the API: every interrupted session gets
 * exactly one resume run and one BullMQ job. And dead-worker detection needs two looks at
 * least confirmDeathMs apart, so a reconnecting worker is not taken for a dead one.
 *
 * The sweepers are Sweeper instances in this process, each with its own Redis connection,
 * Postgres pool and queue, driven by calling tick() concurrently.
 */
import { randomUUID } from "node:crypto";
import type { Queue } from "bullmq";
import { Redis } from "ioredis";
import pino from "pino";
import { afterAll, beforeAll, describe, expect, it, vi } from "vitest";
import type { FleetClient } from "../src/producer/client.js";
import { parseAgentConfig } from "../src/shared/agent-config.js";
import { type Database, openDatabase } from "../src/shared/db/client.js";
import { SessionLease } from "../src/shared/lease.js";
import { createMetrics } from "../src/shared/metrics.js";
import { QUEUES, RunQueues } from "../src/shared/queues.js";
import { closeRedis, createRedis, masters } from "../src/shared/redis.js";
import { DEFAULT_RESUME_POLICY } from "../src/shared/resume-policy.js";
import { AutomaticResumes } from "../src/shared/store/automatic-resumes.js";
import { SessionQueries } from "../src/shared/store/session-queries.js";
import { livenessName } from "../src/shared/worker-signals.js";
import { liveWorkers } from "../src/sweeper/liveness.js";
import { SweepQueries } from "../src/sweeper/sweep-queries.js";
import { Sweeper } from "../src/sweeper/sweeper.js";
import { createFleetEnv, type FleetEnv, type WorkerProcess, waitFor } from "./support/fleet-env.js";

const AGENT = parseAgentConfig({ model: { provider: "scripted", steps: [{ text: "resumed answer" }] } });
const JOB_STATES = ["waiting", "delayed", "prioritized", "active", "completed", "failed"] as const;

type OwnSweeper = { sweeper: Sweeper; queues: RunQueues; close: () => Promise<void> };

describe("concurrent sweepers", () => {
  let fleet: FleetEnv;
  let client: FleetClient;
  let queries: SessionQueries;
  let queues: RunQueues;
  let queue: Queue; // resumes: what the sweepers enqueue
  const sweepers: OwnSweeper[] = [];
  let worker: WorkerProcess | undefined;

  /** A sweeper with its own connections, as a separate `fleet sweeper` process would have. */
  function makeSweeper(options: { confirmDeathMs?: number; now?: () => number } = {}): OwnSweeper {
    const redis: Redis = createRedis(fleet.config.redisUrl, "worker");
    const database: Database = openDatabase(fleet.config.databaseUrl, { max: 4 });
    const ownQueues = new RunQueues(redis, fleet.config.prefix);
    const sweeper = new Sweeper(
      {
        prefix: fleet.config.prefix,
        redis,
        lease: new SessionLease(redis, fleet.config.prefix, fleet.config.leaseTtlMs),
        queries: new SessionQueries(database),
        sweeps: new SweepQueries(database),
        queues: ownQueues,
        metrics: createMetrics("sweeper"),
        resumes: new AutomaticResumes(
          database,
          { ...DEFAULT_RESUME_POLICY, backoffBaseMs: 100 },
          createMetrics("sweeper-resumes"),
        ),
        log: pino({ level: "silent" }),
        now: options.now,
      },
      { confirmDeathMs: options.confirmDeathMs },
    );
    const own: OwnSweeper = {
      sweeper,
      queues: ownQueues,
      close: async () => {
        await ownQueues.close();
        await closeRedis(redis);
        await database.close();
      },
    };
    sweepers.push(own);
    return own;
  }

  async function interruptedSessions(n: number): Promise<string[]> {
    const ids: string[] = [];
    for (let i = 0; i < n; i++) {
      const { id } = await queries.createSession({
        agent: AGENT,
        messages: [{ role: "user", content: `question ${i}` }],
      });
      ids.push(id);
    }
    // As if a run had taken each and its worker had stopped before calling the model (an
    // imported history alone runs nothing).
    await fleet.database.sql`update sessions set run_started = true where id in ${fleet.database.sql(ids)}`;
    return ids;
  }

  /** Resume runs per session, for these sessions (0 when it has none). */
  async function resumeRuns(ids: string[]) {
    return fleet.database.sql<{ id: string; session_id: string; trigger: string; status: string }[]>`
      select id, session_id, trigger, status from runs
       where kind = 'resume' and session_id in ${fleet.database.sql(ids)}`;
  }

  async function jobIds(): Promise<string[]> {
    return (await queue.getJobs([...JOB_STATES])).map((j) => j.id!);
  }

  /** Waits until these sessions end in a completed answer and none of their runs is unfinished. */
  async function waitAllCompleted(ids: string[], timeoutMs: number): Promise<void> {
    await waitFor(
      async () => {
        const [row] = await fleet.database.sql<{ n: number }[]>`
          select count(*)::int as n from sessions
           where id in ${fleet.database.sql(ids)} and tail_state = 'completed'
             and not exists (select 1 from runs r where r.session_id = sessions.id and r.status <> 'ended')`;
        return row!.n === ids.length;
      },
      timeoutMs,
      `${ids.length} sessions completed`,
    );
  }

  async function stopWorker(): Promise<void> {
    if (!worker) return;
    worker.child.kill("SIGTERM");
    await worker.exited;
    worker = undefined;
  }

  beforeAll(async () => {
    fleet = await createFleetEnv("sweepconc");
    ({ client } = await fleet.startApi());
    queries = new SessionQueries(fleet.database);
    queues = new RunQueues(fleet.redis, fleet.config.prefix);
    queue = queues.resumes;
  });
  afterAll(async () => {
    for (const s of sweepers) await s.close();
    await queues?.close();
    await fleet?.close();
  });

  it("two sweepers ticking at once enqueue exactly one resume and one job per session", async () => {
    const ids = await interruptedSessions(30);
    const a = makeSweeper();
    const b = makeSweeper();

    // No worker yet: every resume stays queued, so each round races over the same state.
    let resumed = 0;
    for (let round = 0; round < 10; round++) {
      const results = await Promise.all([a.sweeper.tick(), b.sweeper.tick(), a.sweeper.tick()]);
      for (const r of results) {
        resumed += r.resumed;
        expect(r.parked).toBe(0);
      }
    }
    expect(resumed).toBe(30);

    const runs = await resumeRuns(ids);
    const perSession = new Map<string, number>();
    for (const run of runs) perSession.set(run.session_id, (perSession.get(run.session_id) ?? 0) + 1);
    expect(perSession.size).toBe(30);
    expect([...new Set(perSession.values())]).toEqual([1]);
    expect(new Set(runs.map((r) => `${r.trigger}/${r.status}`))).toEqual(new Set(["sweeper/queued"]));

    const jobs = await jobIds();
    expect(jobs).toHaveLength(30);
    expect(new Set(jobs)).toEqual(
      new Set(runs.map((r) => QUEUES.runs.jobId({ sessionId: r.session_id, runId: r.id }))),
    );
    const attempts = await fleet.database.sql<{ resume_attempts: number }[]>`
      select resume_attempts from sessions where id in ${fleet.database.sql(ids)}`;
    expect(new Set(attempts.map((s) => s.resume_attempts))).toEqual(new Set([1]));

    // A worker arrives while the sweepers keep ticking: each session completes, resumed once.
    worker = await fleet.spawnWorker({ WORKER_CONCURRENCY: "10" });
    let ticking = true;
    const ticker = (async () => {
      while (ticking) {
        await Promise.all([a.sweeper.tick(), b.sweeper.tick()]);
        await new Promise((r) => setTimeout(r, 20));
      }
    })();
    try {
      await waitAllCompleted(ids, 30_000);
    } finally {
      ticking = false;
      await ticker;
    }
    const after = await resumeRuns(ids);
    expect(after).toHaveLength(30);
    for (const id of ids) {
      const session = await client.getSession(id);
      expect(session.status).toBe("completed");
      expect(session.runs).toHaveLength(1);
      expect(session.runs[0]).toMatchObject({ kind: "resume", trigger: "sweeper", endedReason: "completed" });
      expect(session.messages.map((m) => m.role)).toEqual(["user", "assistant"]);
    }
    await stopWorker();
  }, 50_000);

  it("an API resume racing the sweepers joins the one resume run", async () => {
    expect(worker).toBeUndefined();
    const [a, b] = sweepers;
    // Deterministic join first: the sweeper queued the resume, the API call gets that run.
    const [first] = await interruptedSessions(1);
    expect((await a!.sweeper.sweepInterrupted()).resumed).toBe(1);
    const [queued] = await resumeRuns([first!]);
    const joined = await client.resume(first!);
    expect(joined).toEqual({ runId: queued!.id, kind: "call_model" });
    expect(await resumeRuns([first!])).toHaveLength(1);

    const ids = await interruptedSessions(10);
    let sweeping = true;
    const ticker = (async () => {
      for (let round = 0; sweeping || round < 10; round++) {
        await Promise.all([a!.sweeper.tick(), b!.sweeper.tick()]);
      }
    })();
    const answers = await Promise.all(
      ids.map(async (id, i) => {
        await new Promise((r) => setTimeout(r, i * 7));
        return client.resume(id);
      }),
    ).finally(() => {
      sweeping = false;
    });
    await ticker;

    const runs = await resumeRuns(ids);
    expect(runs).toHaveLength(10);
    for (const [i, id] of ids.entries()) {
      const mine = runs.filter((r) => r.session_id === id);
      expect(mine).toHaveLength(1);
      expect(answers[i]).toEqual({ runId: mine[0]!.id, kind: "call_model" });
    }
    const byTrigger = runs.reduce<Record<string, number>>((acc, r) => {
      acc[r.trigger] = (acc[r.trigger] ?? 0) + 1;
      return acc;
    }, {});
    console.log(`API vs sweepers, who created the resume run: ${JSON.stringify(byTrigger)}`);

    const all = [first!, ...ids];
    const allRuns = await resumeRuns(all);
    const jobs = await jobIds();
    for (const run of allRuns)
      expect(
        jobs.filter((j) => j === QUEUES.runs.jobId({ sessionId: run.session_id, runId: run.id })),
      ).toHaveLength(1);
    // 30 completed jobs from the first test, plus one per new resume run.
    expect(jobs).toHaveLength(30 + all.length);

    worker = await fleet.spawnWorker();
    await waitAllCompleted(all, 20_000);
    const done = await resumeRuns(all);
    expect(done).toHaveLength(all.length);
    expect(new Set(done.map((r) => r.status))).toEqual(new Set(["ended"]));
  }, 40_000);

  it("a tick's liveness checks (abandoned runs, dead claims) read CLIENT LIST once between them", async () => {
    const { sweeper } = makeSweeper();
    const [id] = await interruptedSessions(1);
    const runId = randomUUID();
    // A running run, so that the abandoned-runs check needs to know who is alive.
    await fleet.database.sql`
      insert into runs (id, session_id, kind, trigger, status, worker_id, started_at, job_id)
      values (${runId}, ${id!}, 'run', 'api', 'running', ${`live-${randomUUID().slice(0, 8)}`}, now(),
              ${QUEUES.runs.jobId({ sessionId: id!, runId })})`;
    // One reading asks every master (one, or each of a cluster's).
    const nodes = masters(fleet.redis).length;
    const lists = () =>
      client.mock.calls.filter(([sub]) => String(sub).toUpperCase() === "LIST").length / nodes;
    const client = vi.spyOn(Redis.prototype, "client");
    try {
      await sweeper.sweepAbandoned();
      await sweeper.sweepDeadClaims();
      expect(lists()).toBe(2); // each alone reads it
      client.mockClear();
      await sweeper.sweepWorkers();
      expect(lists()).toBe(1);
    } finally {
      client.mockRestore();
      await fleet.database
        .sql`update runs set status = 'ended', ended_reason = 'crashed', ended_at = now() where id = ${runId}`;
    }
  });

  it("a worker missing from CLIENT LIST once, or reconnecting, is not taken for dead", async () => {
    let now = Date.now();
    const t0 = now;
    const confirmMs = 500;
    expect(confirmMs).toBeLessThan(fleet.config.leaseTtlMs); // so only death, not lease expiry, can end it
    const { sweeper } = makeSweeper({ confirmDeathMs: confirmMs, now: () => now });

    const ghost = `ghost-${randomUUID().slice(0, 8)}`;
    const [id] = await interruptedSessions(1);
    const runId = randomUUID();
    await fleet.database.sql`
      insert into runs (id, session_id, kind, trigger, status, worker_id, started_at, job_id)
      values (${runId}, ${id!}, 'run', 'api', 'running', ${ghost}, ${new Date(t0).toISOString()},
              ${QUEUES.runs.jobId({ sessionId: id!, runId })})`;
    expect(await fleet.redis.exists(`${fleet.config.prefix}:lease:${id}`)).toBe(0);
    const runStatus = async () =>
      (
        await fleet.database.sql<{ status: string; ended_reason: string | null }[]>`
        select status, ended_reason from runs where id = ${runId}`
      )[0];

    // One observation with the worker absent: not dead yet.
    expect(await sweeper.sweepAbandoned()).toBe(0);
    expect(await runStatus()).toEqual({ status: "running", ended_reason: null });

    // It reconnects (its named connection is back) long after the first miss: still alive.
    const conn = createRedis(fleet.config.redisUrl, "worker", livenessName(fleet.config.prefix, ghost));
    await waitFor(
      async () => (await liveWorkers(fleet.redis, fleet.config.prefix)).has(ghost),
      5_000,
      "ghost connected",
    );
    now = t0 + confirmMs + 100;
    expect(await sweeper.sweepAbandoned()).toBe(0);

    // It drops again: the clock of its absence starts over.
    await closeRedis(conn);
    await waitFor(
      async () => !(await liveWorkers(fleet.redis, fleet.config.prefix)).has(ghost),
      5_000,
      "ghost gone",
    );
    now = t0 + confirmMs + 200;
    expect(await sweeper.sweepAbandoned()).toBe(0);
    now = t0 + confirmMs + 200 + confirmMs - 1; // two looks, but less than confirmMs apart
    expect(await sweeper.sweepAbandoned()).toBe(0);
    expect(await runStatus()).toEqual({ status: "running", ended_reason: null });

    // Two looks at least confirmMs apart: dead. The run ends crashed and a resume is queued.
    now = t0 + confirmMs + 200 + confirmMs;
    expect(now - t0).toBeLessThan(fleet.config.leaseTtlMs);
    expect(await sweeper.sweepAbandoned()).toBe(1);
    expect(await runStatus()).toEqual({ status: "ended", ended_reason: "crashed" });
    const resumes = await fleet.database.sql<{ trigger: string; resume_kind: string; last_sign_at: Date }[]>`
      select trigger, resume_kind, last_sign_at from runs where session_id = ${id!} and kind = 'resume'`;
    expect(resumes).toHaveLength(1);
    expect(resumes[0]).toMatchObject({ trigger: "sweeper", resume_kind: "call_model" });
    expect(resumes[0]!.last_sign_at).not.toBeNull();
    expect(await sweeper.sweepAbandoned()).toBe(0);

    await waitAllCompleted([id!], 15_000);
    expect((await client.getSession(id!)).messages.at(-1)).toMatchObject({ content: "resumed answer" });
  });
});
