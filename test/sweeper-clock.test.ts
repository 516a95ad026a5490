/**
 * The sweeper decides that a frozen worker's lease expired from how long its run has been
 * running. The run's start is Postgres's clock; the age must be too, not the sweeper host's
 * clock: a sweeper 10 minutes behind Postgres left a frozen worker's sessions alone for 10
 * minutes (and one ahead could take a run that just started for an old one).
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
import { Sweeper } from "../src/sweeper/sweeper.js";
import { createFleetEnv, type FleetEnv, waitFor } from "./support/fleet-env.js";

const AGENT = parseAgentConfig({ model: { provider: "scripted", steps: [{ text: "resumed" }] } });

describe("the sweeper and clocks", () => {
  let fleet: FleetEnv;
  let queues: RunQueues;

  beforeAll(async () => {
    fleet = await createFleetEnv("sweeperclock");
    queues = new RunQueues(fleet.redis, fleet.config.prefix);
  });
  afterAll(async () => {
    await queues?.close();
    await fleet?.close();
  });

  it("ends a frozen worker's run once its lease is gone, whatever the sweeper host's clock says", async () => {
    const tenMinutes = 10 * 60_000;
    const metrics = createMetrics("sweeper-clock");
    const sweeper = new Sweeper({
      prefix: fleet.config.prefix,
      redis: fleet.redis,
      lease: new SessionLease(fleet.redis, fleet.config.prefix, fleet.config.leaseTtlMs),
      queries: new SessionQueries(fleet.database),
      sweeps: new SweepQueries(fleet.database),
      queues,
      metrics,
      resumes: new AutomaticResumes(fleet.database, DEFAULT_RESUME_POLICY, metrics),
      log: pino({ level: "silent" }),
      now: () => Date.now() - tenMinutes, // this host's clock is 10 minutes behind Postgres's
    });
    // A frozen worker: its connection is listed (alive), its lease lapsed long ago.
    const frozen = `frozen-${randomUUID().slice(0, 8)}`;
    const conn = createRedis(fleet.config.redisUrl, "worker", livenessName(fleet.config.prefix, frozen));
    try {
      await waitFor(
        async () => (await liveWorkers(fleet.redis, fleet.config.prefix)).has(frozen),
        5_000,
        "the frozen worker's connection listed",
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
        values (${runId}, ${id}, 'run', 'api', 'running', ${frozen}, now() - make_interval(secs => ${3 * ttlSeconds}),
                ${QUEUES.runs.jobId({ sessionId: id, runId })})`;

      expect(await sweeper.sweepAbandoned()).toBe(1);
      const [run] = await fleet.database.sql<{ status: string; ended_reason: string }[]>`
        select status, ended_reason from runs where id = ${runId}`;
      expect(run).toEqual({ status: "ended", ended_reason: "stalled" });
    } finally {
      await closeRedis(conn);
    }
  });
});
