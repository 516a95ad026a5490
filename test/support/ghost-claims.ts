/**
 * A job claimed by a worker that dies before it starts its run, and the sweeper that finds it:
 * what the dead-claims tests build. The "ghost" is a BullMQ worker named `ghost` with no liveness
 * connection of the fleet's, exactly like a process SIGKILLed right after its claim; the sweeper
 * is one in this process (its passes called by the test), confirming a death in 100 ms.
 */
import { Worker } from "bullmq";
import { loadConfig } from "../../src/shared/config.js";
import { SessionLease } from "../../src/shared/lease.js";
import { createMetrics, type FleetMetrics } from "../../src/shared/metrics.js";
import type { RunQueues } from "../../src/shared/queues.js";
import { DEFAULT_RESUME_POLICY } from "../../src/shared/resume-policy.js";
import { AutomaticResumes } from "../../src/shared/store/automatic-resumes.js";
import { SessionQueries } from "../../src/shared/store/session-queries.js";
import { SweepQueries } from "../../src/sweeper/sweep-queries.js";
import { Sweeper } from "../../src/sweeper/sweeper.js";
import { type FleetEnv, waitFor } from "./fleet-env.js";

const silent = { info() {}, warn() {}, debug() {} };

/**
 * Starts the ghost on `queueName` and resolves once it holds a job (which it never finishes);
 * the caller closes it (`close(true)`), leaving the job active with no live worker.
 */
export async function ghostClaim(fleet: FleetEnv, queueName: string): Promise<Worker> {
  let claimed = false;
  const ghost = new Worker(
    queueName,
    async () => {
      claimed = true;
      await new Promise(() => {});
    },
    {
      connection: fleet.redis.duplicate({ maxRetriesPerRequest: null }),
      prefix: fleet.config.prefix,
      name: "ghost",
    },
  );
  await waitFor(() => claimed, 10_000, "the ghost to claim the job");
  return ghost;
}

/** A sweeper over `fleet` whose passes the test calls; `resumes` and `queries` default to new ones. */
export function testSweeper(
  fleet: FleetEnv,
  queues: RunQueues,
  parts: {
    metrics?: FleetMetrics;
    resumes?: AutomaticResumes;
    queries?: SessionQueries;
    /** How long a parker has to announce its parking before the sweeper's part 5 does. */
    parkAnnounceGraceMs?: number;
  } = {},
): Sweeper {
  const config = loadConfig(fleet.env);
  const metrics = parts.metrics ?? createMetrics("sweeper-test");
  return new Sweeper(
    {
      prefix: config.prefix,
      redis: fleet.redis,
      lease: new SessionLease(fleet.redis, config.prefix, config.leaseTtlMs),
      queries: parts.queries ?? new SessionQueries(fleet.database),
      sweeps: new SweepQueries(fleet.database),
      queues,
      metrics,
      resumes: parts.resumes ?? new AutomaticResumes(fleet.database, DEFAULT_RESUME_POLICY, metrics),
      log: silent,
    },
    {
      confirmDeathMs: 100,
      ...(parts.parkAnnounceGraceMs !== undefined ? { parkAnnounceGraceMs: parts.parkAnnounceGraceMs } : {}),
    },
  );
}
