/**
 * A counted retry (AutomaticResumes.countRetry) whose statement committed but whose answer
 * was lost — the sweeper's connection to Postgres died after the commit (test/support/pg-proxy.ts
 * drops the COMMIT's answer and resets the connection) — is counted once: the next sweep finds
 * the same attempt (the same finished job) already counted, and only adds its job. Before, the
 * next sweep counted it again (resume_attempts 2 for one retry), and a session reached
 * attempts_exhausted in fewer retries than its budget allows for each answer lost. A later,
 * real failure of the job re-added is a new attempt and is counted.
 */
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { parseAgentConfig } from "../src/shared/agent-config.js";
import { bullmq } from "../src/shared/cjs-packages.js";
import { type Database, openDatabase } from "../src/shared/db/client.js";
import { QUEUES, RunQueues } from "../src/shared/queues.js";
import { SessionQueries } from "../src/shared/store/session-queries.js";
import { createFleetEnv, type FleetEnv } from "./support/fleet-env.js";
import { type PgProxy, startPgProxy } from "./support/pg-proxy.js";
import { sweeperOf } from "./support/stalled-run.js";

describe("a counted retry whose answer was lost", () => {
  let fleet: FleetEnv;
  let proxy: PgProxy;
  let viaProxy: Database;
  let queues: RunQueues;

  beforeAll(async () => {
    proxy = await startPgProxy();
    fleet = await createFleetEnv("retryonce");
    viaProxy = openDatabase(proxy.urlFor(fleet.env.DATABASE_URL!), { max: 1, silenceMs: 3_000 });
    queues = new RunQueues(fleet.redis, fleet.config.prefix);
  }, 60_000);
  afterAll(async () => {
    await queues?.close();
    await viaProxy?.close();
    await fleet?.close();
    await proxy?.close();
  });

  /** Takes the run's job as a worker would and fails it for good (the queue gave up on it). */
  async function failForGood(jobId: string): Promise<void> {
    const worker = new bullmq.Worker(QUEUES.runs.name, null, {
      connection: fleet.redis.duplicate(),
      prefix: fleet.config.prefix,
      autorun: false,
    });
    try {
      const token = `failer-${jobId}`;
      const job = await worker.getNextJob(token, { block: false });
      expect(job?.id).toBe(jobId);
      await job!.moveToFailed(new bullmq.UnrecoverableError("the queue gave up"), token);
      expect(await queues.jobStates("run", [jobId])).toEqual(["finished"]);
    } finally {
      await worker.close();
    }
  }

  const attempts = async (id: string) =>
    (
      await fleet.database.sql<{ n: number }[]>`select resume_attempts as n from sessions where id = ${id}`
    )[0]!.n;

  it("is counted once, its job added once; the job's next failure is counted again", async () => {
    const queries = new SessionQueries(fleet.database);
    const agent = parseAgentConfig({ model: { provider: "scripted", steps: [{ text: "done" }] } });
    const { id } = await queries.createSession({ agent });
    const { run } = await queries.createRun({ sessionId: id, kind: "run", trigger: "api", input: "hi" });
    await fleet.database.sql`update runs set created_at = now() - interval '10 seconds' where id = ${run.id}`;
    const jobId = await queues.enqueue("run", { sessionId: id, runId: run.id });
    await failForGood(jobId);
    // The sweeper's counted retries go through the proxy; everything else straight to Postgres.
    const sweeper = sweeperOf(fleet, queues, { resumesDatabase: viaProxy });

    const cut = proxy.dropAnswer((sent) => /\bcommit\b/i.test(sent));
    const lost = await sweeper.sweepOrphanedRuns().then(
      (n) => n,
      (error: unknown) => error,
    );
    await cut;
    expect(lost).not.toBe(1); // its answer never came: the job was not added again
    expect(await attempts(id)).toBe(1); // but the count committed
    expect(await queues.jobStates("run", [jobId])).toEqual(["finished"]);

    // The next sweep finds the same finished job: the same attempt, already counted.
    expect(await sweeper.sweepOrphanedRuns()).toBe(1);
    expect(await attempts(id)).toBe(1);
    expect(await queues.jobStates("run", [jobId])).toEqual(["pending"]);

    // The job added again fails for good too: a new attempt, counted.
    await failForGood(jobId);
    expect(await sweeper.sweepOrphanedRuns()).toBe(1);
    expect(await attempts(id)).toBe(2);
  }, 60_000);
});
