/**
 * A worker that claims a job and dies before starting its run leaves a queued run behind
 * an active BullMQ job (part 1 of the sweeper, which watches running runs, cannot see it).
 * The sweeper reads the job's `processedBy`, sees that worker is gone, and enqueues the
 * run again; the run completes long before BullMQ's own stalled check would return it.
 */
import type { Queue } from "bullmq";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { parseAgentConfig } from "../src/shared/agent-config.js";
import { QUEUES, RunQueues } from "../src/shared/queues.js";
import { SessionQueries } from "../src/shared/store/session-queries.js";
import { createFleetEnv, type FleetEnv } from "./support/fleet-env.js";
import { ghostClaim, testSweeper } from "./support/ghost-claims.js";

describe("jobs claimed by a worker that died before starting them", () => {
  let fleet: FleetEnv;
  let queues: RunQueues;
  let queue: Queue;
  beforeAll(async () => {
    fleet = await createFleetEnv("deadclaims");
    queues = new RunQueues(fleet.redis, fleet.config.prefix);
    queue = queues.runs;
  });
  afterAll(async () => {
    await queues?.close();
    await fleet?.close();
  });

  it("re-enqueues the run at once and a live worker completes it", async () => {
    const queries = new SessionQueries(fleet.database);
    const { id } = await queries.createSession({
      agent: parseAgentConfig({ model: { provider: "scripted", steps: [{ text: "picked up again" }] } }),
    });
    const { run } = await queries.createRun({ sessionId: id, kind: "run", trigger: "api", input: "hello" });
    await queues.enqueue("run", { sessionId: id, runId: run.id });

    // A "worker" named ghost claims the job and never starts the run; it has no liveness
    // connection, exactly like a process that was SIGKILLed right after claiming.
    const ghost = await ghostClaim(fleet, QUEUES.runs.name);
    const jobId = QUEUES.runs.jobId({ sessionId: id, runId: run.id });
    expect(await (await queue.getJob(jobId))?.getState()).toBe("active");
    expect((await queue.getJob(jobId))?.processedBy).toBe("ghost");
    await ghost.close(true);

    const sweeper = testSweeper(fleet, queues, { queries });
    expect(await sweeper.sweepDeadClaims()).toBe(0); // first sight of the missing worker
    await new Promise((r) => setTimeout(r, 150));
    expect(await sweeper.sweepDeadClaims()).toBe(1);
    expect(await queue.getJob(`${jobId}-after-ghost`)).toBeDefined();
    // Already re-added: not added, nor counted against the session, twice.
    expect(await sweeper.sweepDeadClaims()).toBe(0);
    const [row] = await fleet.database.sql<
      { n: number }[]
    >`select resume_attempts as n from sessions where id = ${id}`;
    expect(row!.n).toBe(1);
    expect((await queue.getJobs(["waiting"])).map((j) => j.id)).toEqual([`${jobId}-after-ghost`]);

    await fleet.spawnWorker();
    const { client } = await fleet.startApi();
    const ended = await client.waitForRun(run.id, { timeoutMs: 15_000 });
    expect(ended.endedReason).toBe("completed");
    const session = await client.getSession(id);
    expect(session.messages.map((m) => [m.role, m.content])).toEqual([
      ["user", "hello"],
      ["assistant", "picked up again"],
    ]);
    // Once the run is taken, the sweeper leaves the stale job alone.
    expect(await sweeper.sweepDeadClaims()).toBe(0);
  }, 45_000);
});
