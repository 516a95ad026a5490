/**
 * fleet_crash_to_resume_seconds for a resume that follows a claim: a dead worker's job handed
 * out again (BullMQ's stalled check, or its retry of a failed job) before any sweeper looked.
 * The claim ends the run the dead holder left running and the worker that claimed asks for the
 * resume itself (session-job.ts); that resume had no last sign of life stored, so the histogram
 * got no sample for it, and a fleet whose sweeper was down showed no slow resumes at all. The
 * sign is the one the sweeper uses (resume-or-park.ts): the later of the session's last append
 * or claim before this claim (Postgres) and the dead holder's last lease renewal (Redis, read by
 * the lease's take in the same script that takes it). Real worker (in this process), Postgres
 * and Redis; the dead holder's run, renewal and job are written as it left them.
 */
import { randomUUID } from "node:crypto";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { parseAgentConfig } from "../src/shared/agent-config.js";
import { SessionLease } from "../src/shared/lease.js";
import { RunQueues } from "../src/shared/queues.js";
import { SessionQueries } from "../src/shared/store/session-queries.js";
import { type RunningWorker, startWorker } from "../src/worker/worker.js";
import { createFleetEnv, type FleetEnv, waitFor } from "./support/fleet-env.js";
import { sampleValue } from "./support/metric-samples.js";

let fleet: FleetEnv;
let worker: RunningWorker;
let queues: RunQueues;

beforeAll(async () => {
  fleet = await createFleetEnv("claim-resume-crash-clock");
  queues = new RunQueues(fleet.redis, fleet.config.prefix);
  worker = await startWorker({ ...fleet.config, logLevel: "silent" }, { serveMetrics: false });
}, 60_000);
afterAll(async () => {
  await worker?.stop();
  await queues?.close();
  await fleet?.close();
});

const AGENT = parseAgentConfig({ model: { provider: "scripted", steps: [{ text: "resumed" }] } });

/** The histogram's count and sum in the worker's registry. */
async function crashClock(): Promise<{ count: number; sum: number }> {
  const text = await worker.metrics.registry.metrics();
  const value = (name: string) => sampleValue(text, name, {}) ?? 0;
  return {
    count: value("fleet_crash_to_resume_seconds_count"),
    sum: value("fleet_crash_to_resume_seconds_sum"),
  };
}

/**
 * A session mid-run on a worker that died: its last append `appendAgoS` seconds ago, its lease
 * last renewed `renewedAgoS` ago and expired since, its job handed out again. Resolves once the
 * resume the claiming worker asked for has completed.
 */
async function deadHoldersJobHandedOut(appendAgoS: number, renewedAgoS: number): Promise<void> {
  const { id } = await new SessionQueries(fleet.database).createSession({
    agent: AGENT,
    messages: [{ role: "user", content: "question" }],
  });
  const runId = randomUUID();
  await fleet.database.sql`
    update sessions set run_started = true, lease_owner = 'dead-worker',
           last_active_at = now() - make_interval(secs => ${appendAgoS}) where id = ${id}`;
  await fleet.database.sql`
    insert into runs (id, session_id, kind, trigger, status, worker_id, started_at, job_id)
    values (${runId}, ${id}, 'run', 'api', 'running', 'dead-worker', now() - interval '10 minutes', 'stale-job')`;
  const lease = new SessionLease(fleet.redis, fleet.config.prefix, fleet.config.leaseTtlMs);
  await fleet.redis.set(lease.renewedKey(id), String(Date.now() - renewedAgoS * 1000), "PX", 3_600_000);
  await queues.enqueue("run", { sessionId: id, runId }, { jobId: `stale-${runId}` });
  await waitFor(
    async () =>
      (
        await fleet.database.sql`
          select 1 from runs where session_id = ${id} and kind = 'resume' and status = 'ended'`
      ).length === 1,
    30_000,
    "the resume the claim asked for to end",
  );
  expect((await fleet.database.sql`select ended_reason from runs where id = ${runId}`)[0]!.ended_reason).toBe(
    "crashed",
  );
}

describe("a resume asked for by the worker whose claim found a dead holder's run", () => {
  it("is timed from the dead holder's last lease renewal when it came after its last append", async () => {
    const before = await crashClock();
    await deadHoldersJobHandedOut(600, 3);
    const after = await crashClock();
    expect(after.count - before.count).toBe(1);
    const seconds = after.sum - before.sum;
    expect(seconds).toBeGreaterThanOrEqual(3);
    expect(seconds).toBeLessThan(600);
  }, 60_000);

  it("is timed from the session's last append when it came after the last renewal", async () => {
    const before = await crashClock();
    await deadHoldersJobHandedOut(3, 600);
    const after = await crashClock();
    expect(after.count - before.count).toBe(1);
    const seconds = after.sum - before.sum;
    expect(seconds).toBeGreaterThanOrEqual(3);
    expect(seconds).toBeLessThan(600);
  }, 60_000);
});
