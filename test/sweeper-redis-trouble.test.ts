/**
 * A lease missing right after Redis was away says nothing: the worker's renewals may not
 * have landed yet, and a live worker takes its lease back (lease-keeper.ts). The sweeper
 * judges a missing lease (`stalled`) only once Redis has answered it well for a whole TTL
 * since its last failure, slow answer or reconnect. A dead worker is still found at once.
 */
import { randomUUID } from "node:crypto";
import pino from "pino";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { parseAgentConfig } from "../src/shared/agent-config.js";
import { SessionLease } from "../src/shared/lease.js";
import { createMetrics } from "../src/shared/metrics.js";
import { QUEUES, RunQueues } from "../src/shared/queues.js";
import { closeRedis, createRedis } from "../src/shared/redis.js";
import { DEFAULT_RESUME_POLICY } from "../src/shared/resume-policy.js";
import { AutomaticResumes } from "../src/shared/store/automatic-resumes.js";
import { SessionQueries } from "../src/shared/store/session-queries.js";
import { livenessName } from "../src/shared/worker-signals.js";
import { liveWorkers } from "../src/sweeper/liveness.js";
import { SweepQueries } from "../src/sweeper/sweep-queries.js";
import { leaseJudgeable, Sweeper, slowAnswer } from "../src/sweeper/sweeper.js";
import { createFleetEnv, type FleetEnv, waitFor } from "./support/fleet-env.js";

const AGENT = parseAgentConfig({ model: { provider: "scripted", steps: [{ text: "resumed" }] } });

describe("the sweeper after Redis trouble", () => {
  let fleet: FleetEnv;
  let queues: RunQueues;

  beforeAll(async () => {
    fleet = await createFleetEnv("sweepertrouble");
    queues = new RunQueues(fleet.redis, fleet.config.prefix);
  });
  afterAll(async () => {
    await queues?.close();
    await fleet?.close();
  });

  it("pure rules: a slow answer is one later than a renewal period; judge after a whole TTL", () => {
    expect([slowAnswer(666, 2_000), slowAnswer(667, 2_000)]).toEqual([false, true]);
    expect([leaseJudgeable(1_999, 2_000), leaseJudgeable(2_000, 2_000)]).toEqual([false, true]);
    expect(leaseJudgeable(Number.POSITIVE_INFINITY, 2_000)).toBe(true);
  });

  it("leaves a missing lease alone until Redis answered well for a TTL, then ends the run stalled", async () => {
    const clock = { now: Date.now() };
    const metrics = createMetrics("sweeper-trouble");
    const ttl = fleet.config.leaseTtlMs;
    const sweeper = new Sweeper({
      prefix: fleet.config.prefix,
      redis: fleet.redis,
      lease: new SessionLease(fleet.redis, fleet.config.prefix, ttl),
      queries: new SessionQueries(fleet.database),
      sweeps: new SweepQueries(fleet.database),
      queues,
      metrics,
      resumes: new AutomaticResumes(fleet.database, DEFAULT_RESUME_POLICY, metrics),
      log: pino({ level: "silent" }),
      now: () => clock.now,
    });
    // A live worker (its connection is listed) whose run has no lease: Redis just came back.
    const worker = `w-${randomUUID().slice(0, 8)}`;
    const conn = createRedis(fleet.config.redisUrl, "worker", livenessName(fleet.config.prefix, worker));
    try {
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
      await fleet.database.sql`update sessions set run_started = true where id = ${id}`;
      await fleet.database.sql`
        insert into runs (id, session_id, kind, trigger, status, worker_id, started_at, job_id)
        values (${runId}, ${id}, 'run', 'api', 'running', ${worker}, now() - make_interval(secs => ${(3 * ttl) / 1000}),
                ${QUEUES.runs.jobId({ sessionId: id, runId })})`;
      const status = async () =>
        (await fleet.database.sql<{ s: string }[]>`select status as s from runs where id = ${runId}`)[0]!.s;

      sweeper.resetLiveness(); // what sweeper-process does when its connection is ready again
      expect(await sweeper.sweepAbandoned()).toBe(0);
      clock.now += ttl - 1;
      expect(await sweeper.sweepAbandoned()).toBe(0);
      expect(await status()).toBe("running");
      // Still nobody took the lease back after a whole TTL of good answers: frozen.
      clock.now += 1;
      expect(await sweeper.sweepAbandoned()).toBe(1);
      const [run] = await fleet.database.sql<{ status: string; ended_reason: string }[]>`
        select status, ended_reason from runs where id = ${runId}`;
      expect(run).toEqual({ status: "ended", ended_reason: "stalled" });
      // The sweeper held the lease only while it ended the run.
      expect(await new SessionLease(fleet.redis, fleet.config.prefix, ttl).holder(id)).toBeNull();
    } finally {
      await closeRedis(conn);
    }
  });
});
