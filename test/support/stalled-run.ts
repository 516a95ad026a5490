/**
 * A sweeper driven by the test (sweeper-clock, sweeper-redis-trouble, output-limit-continuations,
 * orphaned-runs-backlog), and a run left by a live but frozen worker, for the sweeper's
 * judgement of a missing lease: the worker's liveness connection is listed, its run started
 * three lease TTLs ago, and no lease is held for its session.
 */
import { randomUUID } from "node:crypto";
import pino from "pino";
import { parseAgentConfig } from "../../src/shared/agent-config.js";
import type { Database } from "../../src/shared/db/client.js";
import { SessionLease } from "../../src/shared/lease.js";
import { createMetrics, type FleetMetrics } from "../../src/shared/metrics.js";
import { QUEUES, type RunQueues } from "../../src/shared/queues.js";
import { closeRedis, createRedis } from "../../src/shared/redis.js";
import { DEFAULT_RESUME_POLICY, type ResumePolicy } from "../../src/shared/resume-policy.js";
import { AutomaticResumes } from "../../src/shared/store/automatic-resumes.js";
import { SessionQueries } from "../../src/shared/store/session-queries.js";
import { livenessName } from "../../src/shared/worker-signals.js";
import { liveWorkers } from "../../src/sweeper/liveness.js";
import { SweepQueries } from "../../src/sweeper/sweep-queries.js";
import { Sweeper } from "../../src/sweeper/sweeper.js";
import type { SweeperDeps } from "../../src/sweeper/sweeper-deps.js";
import { type FleetEnv, waitFor } from "./fleet-env.js";

const AGENT = parseAgentConfig({ model: { provider: "scripted", steps: [{ text: "resumed" }] } });

/**
 * A Sweeper of `fleet` with its real stores, silent; `now`: its clock, `policy`: over the default
 * one, `metrics`: its registry (a new one by default), `runEnded`: where its run ends go (none).
 */
export function sweeperOf(
  fleet: FleetEnv,
  queues: RunQueues,
  options: {
    now?: () => number;
    policy?: Partial<ResumePolicy>;
    metrics?: FleetMetrics;
    runEnded?: SweeperDeps["runEnded"];
    /**
     * How long after its start it judges no missing lease: 0 here (these tests judge at once a
     * run they made up), a lease TTL in a sweeper process (sweeper.ts says why).
     */
    startGraceMs?: number;
    /** Where its automatic resumes and counted retries are written (the fleet's database by default). */
    resumesDatabase?: Database;
  } = {},
): Sweeper {
  const metrics = options.metrics ?? createMetrics("sweeper-test");
  return new Sweeper(
    {
      prefix: fleet.config.prefix,
      redis: fleet.redis,
      lease: new SessionLease(fleet.redis, fleet.config.prefix, fleet.config.leaseTtlMs),
      queries: new SessionQueries(fleet.database),
      sweeps: new SweepQueries(fleet.database),
      queues,
      metrics,
      resumes: new AutomaticResumes(
        options.resumesDatabase ?? fleet.database,
        { ...DEFAULT_RESUME_POLICY, ...options.policy },
        metrics,
      ),
      log: pino({ level: "silent" }),
      now: options.now,
      ...(options.runEnded ? { runEnded: options.runEnded } : {}),
    },
    { startGraceMs: options.startGraceMs ?? 0 },
  );
}

/**
 * Runs `body` with a session mid-run on a worker whose liveness connection is listed (closed
 * after), the run started three TTLs ago and no lease held; `runStatus` reads the run's row.
 */
export async function withFrozenWorkersRun(fleet: FleetEnv, body: WorkersRunBody): Promise<void> {
  return withWorkersRun(fleet, "frozen", body);
}

/**
 * The same run left by a dead worker: its liveness connection never listed (a SIGKILLed
 * worker's is gone), so two looks `confirmDeathMs` apart confirm its death and the run's end is
 * `crashed`.
 */
export async function withDeadWorkersRun(fleet: FleetEnv, body: WorkersRunBody): Promise<void> {
  return withWorkersRun(fleet, "dead", body);
}

type WorkersRunBody = (run: {
  sessionId: string;
  /** The worker the run is on (its liveness connection's id). */
  workerId: string;
  runStatus: () => Promise<{ status: string; ended_reason: string | null }>;
}) => Promise<void>;

async function withWorkersRun(
  fleet: FleetEnv,
  state: "frozen" | "dead",
  body: WorkersRunBody,
): Promise<void> {
  const worker = `${state}-${randomUUID().slice(0, 8)}`;
  const conn =
    state === "frozen"
      ? createRedis(fleet.config.redisUrl, "worker", livenessName(fleet.config.prefix, worker))
      : null;
  try {
    if (conn)
      await waitFor(
        async () => (await liveWorkers(fleet.redis, fleet.config.prefix)).has(worker),
        5_000,
        "the worker's connection listed",
      );
    const { id } = await new SessionQueries(fleet.database).createSession({
      agent: AGENT,
      messages: [{ role: "user", content: "question" }],
    });
    const runId = randomUUID();
    const ttlSeconds = fleet.config.leaseTtlMs / 1000;
    await fleet.database.sql`update sessions set run_started = true where id = ${id}`;
    await fleet.database.sql`
      insert into runs (id, session_id, kind, trigger, status, worker_id, started_at, job_id)
      values (${runId}, ${id}, 'run', 'api', 'running', ${worker}, now() - make_interval(secs => ${3 * ttlSeconds}),
              ${QUEUES.runs.jobId({ sessionId: id, runId })})`;
    await body({
      sessionId: id,
      workerId: worker,
      runStatus: async () =>
        (
          await fleet.database.sql<{ status: string; ended_reason: string | null }[]>`
          select status, ended_reason from runs where id = ${runId}`
        )[0]!,
    });
  } finally {
    if (conn) await closeRedis(conn);
  }
}
