/**
 * A session whose automatic resumes are exhausted exactly when the last one's job is claimed
 * by a worker that dies before starting it (a poison that kills every worker that takes it,
 * or a plain crash): the sweeper re-adds such a job counted against the session's one limit
 * (dead-claims.ts, AutomaticResumes.countRetry) and, past it, parks the session
 * `attempts_exhausted`. Before, the resume itself was left `queued` on the parked session:
 * no worker would start it (a claim skips a parked session), yet the session read as
 * running — its resume point `{"resumable": false, "reason": "running"}`, an explicit resume
 * with another model refused 409 `running`, one of its tenant's active sessions for good — and
 * a new message ran that resume first, at the point it could not get past. Now the parking
 * ends it (`crashed`, never started), counted, with its RUN_COMPLETED.
 */
import type { Queue } from "bullmq";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import type { FleetClient } from "../src/producer/client.js";
import { createMetrics } from "../src/shared/metrics.js";
import { QUEUES, RunQueues } from "../src/shared/queues.js";
import { DEFAULT_RESUME_POLICY } from "../src/shared/resume-policy.js";
import { roleEventWriter } from "../src/shared/role-start.js";
import { countActiveSessions } from "../src/shared/store/active-sessions.js";
import { AutomaticResumes } from "../src/shared/store/automatic-resumes.js";
import { createFleetEnv, type FleetEnv } from "./support/fleet-env.js";
import { ghostClaim, testSweeper } from "./support/ghost-claims.js";
import { storedEvents } from "./support/lost-cancel.js";
import { sampleValue } from "./support/metric-samples.js";

describe("the last automatic resume claimed by a worker that died before starting it", () => {
  let fleet: FleetEnv;
  let client: FleetClient;
  let queues: RunQueues;
  let queue: Queue;
  beforeAll(async () => {
    fleet = await createFleetEnv("parkedleftover");
    ({ client } = await fleet.startApi());
    queues = new RunQueues(fleet.redis, fleet.config.prefix);
    queue = queues.resumes;
  });
  afterAll(async () => {
    await queues?.close();
    await fleet?.close();
  });

  it("parks the session with nothing left queued: resumable again, with another model too", async () => {
    const { id } = await client.createSession({
      agent: { model: { provider: "scripted", steps: [{ text: "primary answer" }] } },
      messages: [{ role: "user", content: "question" }],
    });
    const { sql } = fleet.database;
    // Interrupted after a run started (the model never answered), four automatic resumes made no progress.
    await sql`update sessions set run_started = true, resume_attempts = 4 where id = ${id}`;
    const metrics = createMetrics("sweeper-test");
    const resumes = new AutomaticResumes(fleet.database, DEFAULT_RESUME_POLICY, metrics);
    // As the sweeper process's: SESSION_PARKED (and now the resume's RUN_COMPLETED) go to the stream.
    resumes.events = roleEventWriter(fleet.redis, fleet.config, metrics.eventsWritten, 0, {});
    const scheduled = await resumes.schedule({ sessionId: id, trigger: "sweeper" });
    expect(scheduled).toMatchObject({ action: "resume", attempt: 5 });
    if (scheduled.action !== "resume") return;
    const runId = scheduled.run.id;
    await queues.enqueue("resume", { sessionId: id, runId });

    // A "worker" named ghost claims the job and never starts the run, as one SIGKILLed right after.
    const ghost = await ghostClaim(fleet, QUEUES.resumes.name);
    await ghost.close(true);
    const sweeper = testSweeper(fleet, queues, { metrics, resumes });
    expect(await sweeper.sweepDeadClaims()).toBe(0); // first sight of the missing worker
    await new Promise((r) => setTimeout(r, 150));
    expect(await sweeper.sweepDeadClaims()).toBe(0); // the limit is reached: parked, not re-added
    expect(
      await queue.getJob(`${QUEUES.resumes.jobId({ sessionId: id, runId })}-after-ghost`),
    ).toBeUndefined();

    const session = await client.getSession(id);
    expect(session.status).toBe("parked");
    expect(session.parkedReason).toMatch(/^attempts_exhausted: 5 automatic retries made no progress/);
    expect(session.runs.find((run) => run.id === runId)).toMatchObject({
      status: "ended",
      endedReason: "crashed",
    });
    const [row] = await sql<{ tenant: string }[]>`select tenant from sessions where id = ${id}`;
    expect(await countActiveSessions(sql, row!.tenant)).toBe(0);
    expect(await client.resumePoint(id)).toMatchObject({ resumable: true, kind: "call_model" });
    const registry = await metrics.registry.metrics();
    expect(sampleValue(registry, "fleet_runs_total", { kind: "resume", outcome: "crashed" })).toBe(1);
    expect(sampleValue(registry, "fleet_sessions_parked_total", { reason: "attempts_exhausted" })).toBe(1);
    const events = (await storedEvents(fleet, id)).filter((e) => e.type !== "MESSAGE");
    expect(events).toMatchObject([
      { type: "RUN_COMPLETED", runId, outcome: "crashed" },
      { type: "SESSION_PARKED", reason: "attempts_exhausted" },
    ]);

    // Someone acts: a resume with another model, which a worker runs.
    const other = { provider: "scripted" as const, steps: [{ text: "other model's answer" }] };
    const resumed = await client.resume(id, { model: other });
    expect(resumed).toMatchObject({ kind: "call_model" });
    expect(resumed.runId).not.toBe(runId);
    await fleet.spawnWorker();
    expect((await client.waitForRun(resumed.runId, { timeoutMs: 20_000 })).endedReason).toBe("completed");
    const after = await client.getSession(id);
    expect(after.messages.map((m) => [m.role, m.content])).toEqual([
      ["user", "question"],
      ["assistant", "other model's answer"],
    ]);
  }, 60_000);
});
