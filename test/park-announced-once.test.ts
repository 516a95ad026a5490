/**
 * A session parked by a counted retry (AutomaticResumes.countRetry: the last automatic resume's
 * job was claimed by a worker that died before starting it) whose parking committed but whose
 * answer was lost — the sweeper's connection to Postgres died after the COMMIT
 * (test/support/pg-proxy.ts drops its answer and resets the connection). The parking's
 * RUN_COMPLETED (the resume it ended) and SESSION_PARKED, and its fleet_sessions_parked_total,
 * were written only by the caller that got the answer: none did, and no later sweep looked
 * again (the session is parked, the resume ended), so a client following the session's events
 * never saw the park. Now the parking leaves its announcement owed in the session's row in the
 * same transaction, and whoever finishes it — the parker, or a later sweep that finds it owed
 * — writes it, once: the stream takes a SESSION_PARKED of one parking once (its `parkId`,
 * APPEND_SCRIPT), and the metric is counted by whoever clears the debt.
 */
import type { Queue } from "bullmq";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import type { FleetClient } from "../src/producer/client.js";
import { type Database, openDatabase } from "../src/shared/db/client.js";
import type { EventWriter } from "../src/shared/event-writer.js";
import { createMetrics } from "../src/shared/metrics.js";
import { QUEUES, RunQueues } from "../src/shared/queues.js";
import { DEFAULT_RESUME_POLICY } from "../src/shared/resume-policy.js";
import { roleEventWriter } from "../src/shared/role-start.js";
import { AutomaticResumes } from "../src/shared/store/automatic-resumes.js";
import { createFleetEnv, type FleetEnv, waitFor } from "./support/fleet-env.js";
import { ghostClaim, testSweeper } from "./support/ghost-claims.js";
import { storedEvents } from "./support/lost-cancel.js";
import { sampleValue } from "./support/metric-samples.js";
import { type PgProxy, startPgProxy } from "./support/pg-proxy.js";

describe("a parking whose answer was lost after its commit", () => {
  let fleet: FleetEnv;
  let client: FleetClient;
  let queues: RunQueues;
  let queue: Queue;
  let proxy: PgProxy;
  let viaProxy: Database;
  let events: EventWriter;
  beforeAll(async () => {
    proxy = await startPgProxy();
    fleet = await createFleetEnv("parkannounce");
    ({ client } = await fleet.startApi());
    queues = new RunQueues(fleet.redis, fleet.config.prefix);
    queue = queues.resumes;
    viaProxy = openDatabase(proxy.urlFor(fleet.env.DATABASE_URL!), { max: 1, silenceMs: 3_000 });
    events = roleEventWriter(fleet.redis, fleet.config, createMetrics("events-test").eventsWritten, 0, {});
  }, 60_000);
  afterAll(async () => {
    await queues?.close();
    await viaProxy?.close();
    await fleet?.close();
    await proxy?.close();
  });

  it("is announced once, by the next sweep: RUN_COMPLETED, SESSION_PARKED and the metric", async () => {
    const { id } = await client.createSession({
      agent: { model: { provider: "scripted", steps: [{ text: "answer" }] } },
      messages: [{ role: "user", content: "question" }],
    });
    const { sql } = fleet.database;
    // Interrupted after a run started, four automatic resumes made no progress.
    await sql`update sessions set run_started = true, resume_attempts = 4 where id = ${id}`;
    const metrics = createMetrics("sweeper-test");
    const direct = new AutomaticResumes(fleet.database, DEFAULT_RESUME_POLICY, metrics);
    direct.events = events;
    const scheduled = await direct.schedule({ sessionId: id, trigger: "sweeper" });
    expect(scheduled).toMatchObject({ action: "resume", attempt: 5 });
    if (scheduled.action !== "resume") return;
    const runId = scheduled.run.id;
    await queues.enqueue("resume", { sessionId: id, runId });

    const ghost = await ghostClaim(fleet, QUEUES.resumes.name);
    await ghost.close(true);
    // The sweeper's counted retries (and parkings) go through the proxy.
    const resumes = new AutomaticResumes(viaProxy, DEFAULT_RESUME_POLICY, metrics);
    resumes.events = events;
    const sweeper = testSweeper(fleet, queues, { metrics, resumes, parkAnnounceGraceMs: 0 });
    expect(await sweeper.sweepDeadClaims()).toBe(0); // first sight of the missing worker
    await new Promise((r) => setTimeout(r, 150));
    const cut = proxy.dropAnswer((sent) => /\bcommit\b/i.test(sent));
    expect(await sweeper.sweepDeadClaims()).toBe(0); // the limit is reached: parked, its answer lost
    await cut;
    expect(
      await queue.getJob(`${QUEUES.resumes.jobId({ sessionId: id, runId })}-after-ghost`),
    ).toBeUndefined();
    const session = await client.getSession(id);
    expect(session.status).toBe("parked"); // the parking committed
    expect(session.runs.find((run) => run.id === runId)).toMatchObject({
      status: "ended",
      endedReason: "crashed",
    });
    const before = (await storedEvents(fleet, id)).filter((e) => e.type === "SESSION_PARKED");
    expect(before).toEqual([]); // its answer never came: nothing was announced

    // The next sweeps finish it.
    const parkEvents = async () =>
      (await storedEvents(fleet, id)).filter(
        (e) => e.type === "SESSION_PARKED" || e.type === "RUN_COMPLETED",
      );
    await waitFor(
      async () => {
        await sweeper.tick();
        return (await parkEvents()).some((e) => e.type === "SESSION_PARKED");
      },
      10_000,
      "the parking to be announced",
    );
    await sweeper.tick();
    await sweeper.tick();
    expect(await parkEvents()).toMatchObject([
      { type: "RUN_COMPLETED", runId, outcome: "crashed" },
      { type: "SESSION_PARKED", runId, reason: "attempts_exhausted" },
    ]);
    expect((await parkEvents()).length).toBe(2);
    const registry = await metrics.registry.metrics();
    expect(sampleValue(registry, "fleet_sessions_parked_total", { reason: "attempts_exhausted" })).toBe(1);
    expect(sampleValue(registry, "fleet_runs_total", { kind: "resume", outcome: "crashed" })).toBe(1);
  }, 60_000);

  it("announces nothing in the stream of a session re-opened since, and counts the parking", async () => {
    const { id } = await client.createSession({
      agent: { model: { provider: "scripted", steps: [{ text: "answer" }] } },
      messages: [{ role: "user", content: "question" }],
    });
    // Parked by a parker that never announced it, then re-opened by a new message: active again.
    const owed = { id: "park-reopened", reason: "attempts_exhausted", runs: ["run-ended-with-it"] };
    await fleet.database.sql`
      update sessions set park_announcement = ${JSON.stringify(owed)}::jsonb,
                          updated_at = now() - interval '1 minute' where id = ${id}`;
    const metrics = createMetrics("sweeper-test");
    const resumes = new AutomaticResumes(fleet.database, DEFAULT_RESUME_POLICY, metrics);
    resumes.events = events;
    expect(await resumes.payOwedParks(0)).toBeGreaterThanOrEqual(1);
    const written = (await storedEvents(fleet, id)).filter((e) => e.type !== "MESSAGE");
    expect(written).toEqual([]);
    const [row] = await fleet.database.sql<{ owed: unknown }[]>`
      select park_announcement as owed from sessions where id = ${id}`;
    expect(row!.owed).toBeNull();
    const registry = await metrics.registry.metrics();
    expect(sampleValue(registry, "fleet_sessions_parked_total", { reason: "attempts_exhausted" })).toBe(1);
    expect(await resumes.payOwedParks(0)).toBe(0); // paid: nothing owed any more
  }, 30_000);

  it("takes a SESSION_PARKED of one parking once, whoever writes it how often", async () => {
    const { id } = await client.createSession({
      agent: { model: { provider: "scripted", steps: [{ text: "answer" }] } },
      messages: [{ role: "user", content: "question" }],
    });
    const parked = { type: "SESSION_PARKED" as const, reason: "attempts_exhausted", parkId: "park-1" };
    await events.writeAfterSync(fleet.database, id, [parked]);
    await events.writeAfterSync(fleet.database, id, [parked]); // a late writer, after a repair
    await events.writeAfterSync(fleet.database, id, [{ ...parked, parkId: "park-2" }]); // another parking
    const written = (await storedEvents(fleet, id)).filter((e) => e.type === "SESSION_PARKED");
    expect(written).toEqual([
      { sessionId: id, type: "SESSION_PARKED", reason: "attempts_exhausted" },
      { sessionId: id, type: "SESSION_PARKED", reason: "attempts_exhausted" },
    ]);
  }, 30_000);
});
