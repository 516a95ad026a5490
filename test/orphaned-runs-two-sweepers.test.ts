/**
 * Two sweepers whose wide scans meet on one queued run whose job finished without starting
 * it (the queue gave up on it): each read the job's standing, `finished`, before either acted.
 * The retry is one retry: counted once against the session's budget (resume_attempts), its
 * job added once. Before, the second sweeper counted it again (the session reached
 * attempts_exhausted in half the retries) and removed the job the first had just added, to
 * add it again a backoff later.
 */
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { parseAgentConfig } from "../src/shared/agent-config.js";
import { type JobName, type JobStanding, QUEUES, RunQueues } from "../src/shared/queues.js";
import { SessionQueries } from "../src/shared/store/session-queries.js";
import type { Sweeper } from "../src/sweeper/sweeper.js";
import { createFleetEnv, type FleetEnv } from "./support/fleet-env.js";
import { sweeperOf } from "./support/stalled-run.js";

describe("two sweepers meeting on one failed job", () => {
  let fleet: FleetEnv;
  const queues: RunQueues[] = [];

  beforeAll(async () => {
    fleet = await createFleetEnv("orphantwo");
  });
  afterAll(async () => {
    await Promise.all(queues.map((q) => q.close()));
    await fleet?.close();
  });

  function sweeperWith(jobStates: RunQueues["jobStates"]): Sweeper {
    const own = new RunQueues(fleet.redis, fleet.config.prefix);
    queues.push(own);
    own.jobStates = jobStates;
    return sweeperOf(fleet, own, { policy: { backoffBaseMs: 60_000 } });
  }

  it("count the retry once and leave one job, added once", async () => {
    const queries = new SessionQueries(fleet.database);
    const agent = parseAgentConfig({ model: { provider: "scripted", steps: [{ text: "done" }] } });
    const { id } = await queries.createSession({ agent });
    const { run } = await queries.createRun({ sessionId: id, kind: "run", trigger: "api", input: "hi" });
    await fleet.database.sql`update runs set created_at = now() - interval '10 seconds' where id = ${run.id}`;
    const jobId = QUEUES.runs.jobId({ sessionId: id, runId: run.id });
    // Redis as it stands, but the run's job (never added here) reads as one that failed for
    // good, until a sweeper adds it again.
    const reader = new RunQueues(fleet.redis, fleet.config.prefix);
    queues.push(reader);
    const finished = async (name: JobName, ids: readonly string[]): Promise<JobStanding[]> =>
      (await reader.jobStates(name, ids)).map((state, i) =>
        ids[i] === jobId && state === "missing" ? "finished" : state,
      );
    // B read the job's standing (finished) before A acted; it goes on once A's scan is done.
    let firstDone!: () => void;
    const aDone = new Promise<void>((resolve) => {
      firstDone = resolve;
    });
    let bRead!: () => void;
    const bHasRead = new Promise<void>((resolve) => {
      bRead = resolve;
    });
    let bReads = 0;
    const a = sweeperWith(finished);
    const b = sweeperWith(async (name, ids) => {
      const states = await finished(name, ids);
      if (bReads++ === 0) {
        bRead();
        await aDone;
      }
      return states;
    });
    const second = b.sweepOrphanedRuns();
    await bHasRead;
    expect(await a.sweepOrphanedRuns()).toBe(1);
    const job = await reader.getJob("run", jobId);
    expect(job).toBeDefined();
    firstDone();
    const requeued = await second;
    const [row] = await fleet.database.sql<{ n: number }[]>`
      select resume_attempts as n from sessions where id = ${id}`;
    expect(row!.n).toBe(1);
    expect(requeued).toBe(0);
    // The job A added is the one still there (B did not remove it and add another).
    const now = await reader.getJob("run", jobId);
    expect(now?.timestamp).toBe(job!.timestamp);
  }, 60_000);
});
