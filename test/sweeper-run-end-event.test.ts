/**
 * A sweeper that ends an abandoned run writes its RUN_COMPLETED before it queues the resume.
 * When that write failed (a Postgres connection terminated under it: found by `npm run
 * chaos`, seeds 22 and 33), the resume was queued anyway; once it started, the ended run was
 * no longer the session's latest and `EventWriter.missingRunEnd` never wrote its end: the
 * stream lacked it for good (contracts §7: every run ends with exactly one). Now the session
 * is left to part 2, which writes the lost end and then resumes. The failure is made here on
 * purpose: the first write of the end event fails, as the terminated connection made it.
 */
import { randomUUID } from "node:crypto";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { parseAgentConfig } from "../src/shared/agent-config.js";
import { EventWriter } from "../src/shared/event-writer.js";
import { eventStreamKey } from "../src/shared/events.js";
import { SessionLease } from "../src/shared/lease.js";
import { createMetrics } from "../src/shared/metrics.js";
import { QUEUES, RunQueues } from "../src/shared/queues.js";
import { DEFAULT_RESUME_POLICY } from "../src/shared/resume-policy.js";
import { AutomaticResumes } from "../src/shared/store/automatic-resumes.js";
import { SessionQueries } from "../src/shared/store/session-queries.js";
import { SweepQueries } from "../src/sweeper/sweep-queries.js";
import { Sweeper } from "../src/sweeper/sweeper.js";
import { createFleetEnv, type FleetEnv } from "./support/fleet-env.js";

const AGENT = parseAgentConfig({ model: { provider: "scripted", steps: [{ text: "resumed answer" }] } });

describe("the end event of a run the sweeper ended", () => {
  let fleet: FleetEnv;
  let queues: RunQueues;

  beforeAll(async () => {
    fleet = await createFleetEnv("sweependevent");
    queues = new RunQueues(fleet.redis, fleet.config.prefix);
  });
  afterAll(async () => {
    await queues?.close();
    await fleet?.close();
  });

  it("is written before the resume is queued, also when the first write failed", async () => {
    const { sql } = fleet.database;
    const queries = new SessionQueries(fleet.database);
    const { id } = await queries.createSession({
      agent: AGENT,
      messages: [{ role: "user", content: "question" }],
    });
    await sql`update sessions set run_started = true where id = ${id}`;
    // A run whose worker froze a minute ago: no lease, its worker still listed as connected.
    const ghost = `ghost-${randomUUID().slice(0, 8)}`;
    const runId = randomUUID();
    await sql`
      insert into runs (id, session_id, kind, trigger, status, worker_id, started_at, job_id)
      values (${runId}, ${id}, 'run', 'api', 'running', ${ghost}, now() - interval '1 minute',
              ${QUEUES.runs.jobId({ sessionId: id, runId })})`;

    const events = new EventWriter(fleet.redis, fleet.config.prefix);
    const attempts: string[] = [];
    const warned: string[] = [];
    const sweeper = new Sweeper(
      {
        prefix: fleet.config.prefix,
        redis: fleet.redis,
        lease: new SessionLease(fleet.redis, fleet.config.prefix, fleet.config.leaseTtlMs),
        queries,
        sweeps: new SweepQueries(fleet.database),
        queues,
        metrics: createMetrics("sweeper"),
        resumes: new AutomaticResumes(fleet.database, DEFAULT_RESUME_POLICY, createMetrics("resumes")),
        log: {
          info() {},
          debug() {},
          warn: (...args: unknown[]) => {
            warned.push(String(args[1]));
          },
        },
        runEnded: async (sessionId, endedRunId, outcome) => {
          attempts.push(endedRunId);
          if (attempts.length === 1) throw new Error("terminating connection due to administrator command");
          await events.writeAfterSync(fleet.database, sessionId, [
            { type: "RUN_COMPLETED", runId: endedRunId, outcome },
          ]);
        },
        runEndMissing: (sessionId) => events.missingRunEnd(fleet.database, sessionId, 0),
      },
      // Judges the made-up run at once (a sweeper process waits a lease TTL from its start).
      { startGraceMs: 0 },
    );

    expect(await sweeper.sweepAbandoned(new Set([ghost]))).toBe(1);
    expect(attempts).toEqual([runId]);
    expect(warned).toHaveLength(1);
    const swept = await sweeper.sweepInterrupted();

    const stream = await fleet.redis.xrange(eventStreamKey(fleet.config.prefix, id), "-", "+");
    const written = stream.map(
      ([, fields]) => JSON.parse(fields[fields.indexOf("data") + 1]!) as Record<string, unknown>,
    );
    expect(written.map((e) => e.type)).toEqual(["MESSAGE", "RUN_COMPLETED"]);
    expect(written[1]).toMatchObject({ runId, outcome: "stalled" });
    expect(swept).toEqual({ resumed: 1, parked: 0 });
    const runs = await sql<{ id: string; kind: string; status: string; ended_reason: string | null }[]>`
      select id, kind, status, ended_reason from runs where session_id = ${id} order by queue_seq, created_at`;
    expect(runs.map((r) => [r.kind, r.status, r.ended_reason])).toEqual([
      ["run", "ended", "stalled"],
      ["resume", "queued", null],
    ]);
  });
});
