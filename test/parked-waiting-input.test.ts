/**
 * A session parked while a message sent to it waits to start: its retries are exhausted
 * exactly when that message's job is claimed by a worker that dies before starting it (the
 * sweeper's dead-claims pass counts the retry, AutomaticResumes.countRetry, and parks it
 * `attempts_exhausted`). The message's input is stored only in its run, so the run is kept,
 * waiting for someone to act. Before, that waiting run kept the parked session `running`: its
 * resume point `{"resumable": false, "reason": "running"}`, an explicit resume refused 409
 * `running` for ever, one of its tenant's active sessions (FLEET_TENANT_MAX_ACTIVE_SESSIONS)
 * for good, and a client's `waitForRun` on it waited until its timeout (for ever without one).
 * Now it is no one's work until someone acts: not counted active, the resume point says the
 * waiting message goes to the model, the run says what it waits for (`sessionParkedReason`,
 * and `waitForRun` rejects at once saying so), and an explicit resume (with another model too)
 * starts that message.
 */
import { Queue, Worker } from "bullmq";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { FleetClient } from "../src/producer/client.js";
import { createMetrics } from "../src/shared/metrics.js";
import { QUEUES, RunQueues } from "../src/shared/queues.js";
import { DEFAULT_RESUME_POLICY } from "../src/shared/resume-policy.js";
import { countActiveSessions } from "../src/shared/store/active-sessions.js";
import { ApiKeys } from "../src/shared/store/api-keys.js";
import { DataDeletion } from "../src/shared/store/data-deletion.js";
import { rankAfterCancel } from "./support/fair-cancel.js";
import { createFleetEnv, type FleetEnv, waitFor } from "./support/fleet-env.js";
import { ghostClaim, testSweeper } from "./support/ghost-claims.js";

const AGENT = { model: { provider: "scripted" as const, steps: [{ text: "ok" }] } };

describe("a message waiting to start on a session parked when its retries ran out", () => {
  let fleet: FleetEnv;
  let client: FleetClient;
  let queues: RunQueues;
  let queue: Queue;
  beforeAll(async () => {
    fleet = await createFleetEnv("parkedinput");
    ({ client } = await fleet.startApi());
    queues = new RunQueues(fleet.redis, fleet.config.prefix);
    queue = queues.runs;
  });
  afterAll(async () => {
    await queues?.close();
    await fleet?.close();
  });

  it("whose job ended without starting it: a resume adds that job again, and the sweeper counts no retry of it", async () => {
    const { id } = await client.createSession({
      agent: { model: { provider: "scripted", steps: [{ text: "primary answer" }] } },
      messages: [{ role: "user", content: "question" }],
    });
    const { sql } = fleet.database;
    await sql`update sessions set run_started = true, resume_attempts = ${DEFAULT_RESUME_POLICY.maxAttempts} where id = ${id}`;
    const { runId } = await client.send(id, "sent while it failed");
    const jobId = QUEUES.runs.jobId({ sessionId: id, runId });
    // The queue gave up on the job (a failure past its attempts) without the run starting.
    await (await queue.getJob(jobId))!.remove();
    await queue.add("run", { sessionId: id, runId }, { jobId });
    const done = new Worker(QUEUES.runs.name, async () => "done without starting it", {
      connection: fleet.redis.duplicate({ maxRetriesPerRequest: null }),
      prefix: fleet.config.prefix,
      name: "quitter",
    });
    await waitFor(
      async () => (await (await queue.getJob(jobId))?.isCompleted()) === true,
      10_000,
      "the job to end",
    );
    await done.close();
    const metrics = createMetrics("sweeper-test");
    const sweeper = testSweeper(fleet, queues, { metrics });
    expect(await sweeper.sweepOrphanedRuns(0)).toBe(0); // past the limit: parked, not re-added
    expect((await client.getSession(id)).status).toBe("parked");
    expect(await client.resumePoint(id)).toMatchObject({ resumable: true, kind: "call_model" });

    // No worker runs yet (the next case starts one): the resume's job waits while the sweeper looks.
    expect(await client.resume(id)).toEqual({ runId, kind: "call_model" });
    expect(await (await queue.getJob(jobId))?.getState()).toMatch(/^(waiting|prioritized)$/);
    expect(await sweeper.sweepOrphanedRuns(0)).toBe(0);
    const [row] = await sql<
      { resume_attempts: number }[]
    >`select resume_attempts from sessions where id = ${id}`;
    expect(row!.resume_attempts).toBe(0);
    expect(await client.getRun(runId)).toMatchObject({ status: "queued" });
    await client.cancelSession(id); // leaves no job for the next case's ghost
  }, 60_000);

  it("is kept, counts as no one's work, and starts when someone resumes, with another model too", async () => {
    const { id } = await client.createSession({
      agent: { model: { provider: "scripted", steps: [{ text: "primary answer" }] } },
      messages: [{ role: "user", content: "question" }],
    });
    const { sql } = fleet.database;
    // Interrupted after a run started, five automatic retries made no progress: the next is past the limit.
    await sql`update sessions set run_started = true, resume_attempts = ${DEFAULT_RESUME_POLICY.maxAttempts} where id = ${id}`;
    const { runId } = await client.send(id, "the user's new message");

    // A "worker" named ghost claims the message's job and never starts its run, as one SIGKILLed right after.
    const ghost = await ghostClaim(fleet, QUEUES.runs.name);
    await ghost.close(true);
    const metrics = createMetrics("sweeper-test");
    const sweeper = testSweeper(fleet, queues, { metrics });
    expect(await sweeper.sweepDeadClaims()).toBe(0); // first sight of the missing worker
    await new Promise((r) => setTimeout(r, 150));
    expect(await sweeper.sweepDeadClaims()).toBe(0); // the limit is reached: parked, not re-added
    expect(await queue.getJob(`${QUEUES.runs.jobId({ sessionId: id, runId })}-after-ghost`)).toBeUndefined();

    const session = await client.getSession(id);
    expect(session.status).toBe("parked");
    expect(session.parkedReason).toMatch(/^attempts_exhausted: /);
    // The message is kept (its input is stored only in its run), waiting for someone to act.
    expect(session.runs.find((run) => run.id === runId)).toMatchObject({ kind: "run", status: "queued" });
    const [row] = await sql<{ tenant: string }[]>`select tenant from sessions where id = ${id}`;
    expect(await countActiveSessions(sql, row!.tenant)).toBe(0);
    expect(await client.resumePoint(id)).toMatchObject({ resumable: true, kind: "call_model" });
    // The run says what it waits for, and a client waiting for it is told at once, not at its timeout.
    expect(await client.getRun(runId)).toMatchObject({
      status: "queued",
      sessionParkedReason: session.parkedReason,
    });
    await expect(client.waitForRun(runId, { timeoutMs: Number.POSITIVE_INFINITY })).rejects.toThrow(
      `run ${runId} waits on its parked session (${session.parkedReason}): it starts when someone resumes the session or sends it a message`,
    );

    // Someone acts: a resume with another model starts the waiting message, which a worker runs.
    const other = { provider: "scripted" as const, steps: [{ text: "other model's answer" }] };
    const resumed = await client.resume(id, { model: other });
    expect(resumed).toEqual({ runId, kind: "call_model" });
    expect((await client.getSession(id)).status).not.toBe("parked");
    expect(await client.getRun(runId)).not.toHaveProperty("sessionParkedReason");
    await fleet.spawnWorker();
    expect((await client.waitForRun(runId, { timeoutMs: 20_000 })).endedReason).toBe("completed");
    const after = await client.getSession(id);
    expect(after.messages.map((m) => [m.role, m.content])).toEqual([
      ["user", "question"],
      ["user", "the user's new message"],
      ["assistant", "other model's answer"],
    ]);
    expect(after.runs.filter((run) => run.status !== "ended")).toEqual([]);
  }, 60_000);
});

describe("fair dispatch with a message waiting on a parked session", () => {
  it("a tenant that cancelled its batch starts over though a message waits on its parked session", async () => {
    const fleet = await createFleetEnv("parkedinput-fair");
    const queue = new Queue("runs", { connection: fleet.redis, prefix: fleet.config.prefix });
    try {
      const keys = new ApiKeys(fleet.database);
      const baseUrl = (await fleet.startApi()).api.url;
      const a = new FleetClient({ baseUrl, apiKey: (await keys.create("a")).key });
      const b = new FleetClient({ baseUrl, apiKey: (await keys.create("b")).key });
      // As countRetry leaves it: a's session parked past its retries, its message's job gone.
      const { id } = await a.createSession({ agent: AGENT });
      const { runId } = await a.send(id, "sent while it failed");
      await (await queue.getJob(QUEUES.runs.jobId({ sessionId: id, runId })))!.remove();
      await fleet.database.sql`
        update sessions set status = 'parked', parked_reason = 'attempts_exhausted: 5 automatic retries made no progress'
         where id = ${id}`;
      // No worker: every run waits. Both tenants queue 30; then a cancels its batch and queues one more.
      // a has nothing anyone will start: its next run goes near the head, not behind b's 30.
      const { waiting, rank } = await rankAfterCancel(a, b, queue, AGENT);
      expect(waiting).toBe(31);
      expect(rank).toBeLessThanOrEqual(1);
      expect((await a.getRun(runId)).sessionParkedReason).toMatch(/^attempts_exhausted/);
    } finally {
      await queue.close();
      await fleet.close();
    }
  }, 60_000);
});

describe("retention with a message waiting on a parked session", () => {
  it("deletes such a session idle past the limit, as any parked one: nothing will act on it by itself", async () => {
    const fleet = await createFleetEnv("parkedinput-retention");
    const queue = new Queue("runs", { connection: fleet.redis, prefix: fleet.config.prefix });
    try {
      const { client } = await fleet.startApi();
      const { sql } = fleet.database;
      // As countRetry leaves it: parked past its retries, its message's job gone; and one
      // session with a message queued (active): that one is kept.
      const parked = await client.createSession({ agent: AGENT });
      const { runId } = await client.send(parked.id, "sent while it failed");
      await (await queue.getJob(QUEUES.runs.jobId({ sessionId: parked.id, runId })))!.remove();
      await sql`
        update sessions set status = 'parked', parked_reason = 'attempts_exhausted: 5 automatic retries made no progress'
         where id = ${parked.id}`;
      const active = await client.createSession({ agent: AGENT });
      await client.send(active.id, "waits for a worker");
      await sql`update sessions set updated_at = now() - interval '10 days' where id in ${sql([parked.id, active.id])}`;

      const deleted = await new DataDeletion(fleet.database).expireSessions(86_400_000, 100);
      expect(deleted.sessionIds).toEqual([parked.id]);
      const left = await sql<{ id: string }[]>`select id from sessions`;
      expect(left.map((row) => row.id)).toEqual([active.id]);
    } finally {
      await queue.close();
      await fleet.close();
    }
  }, 60_000);
});
