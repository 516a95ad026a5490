/**
 * A sweeper frozen (SIGSTOP, a long GC pause, a stalled VM) after it ended an abandoned run
 * and before it wrote that run's RUN_COMPLETED: its sweep lock lapses, another sweeper writes
 * the lost end (`missingRunEnd`) and resumes the session, a worker runs the resume to its end.
 * When the first one wakes, its end of the old run must not reach the stream again, after the
 * resume's events (contracts §7: every run ends with exactly one RUN_COMPLETED). Before, it
 * was appended a second time, the stream's last event then saying the session's run stalled.
 * The freeze is made here as a wait inside the first sweeper's `runEnded`; its lock's lapse
 * as the key's removal (what its TTL does while the process is stopped).
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
import { Sweeper, type SweeperDeps } from "../src/sweeper/sweeper.js";
import { createFleetEnv, type FleetEnv, type WorkerProcess, waitFor } from "./support/fleet-env.js";

const AGENT = parseAgentConfig({ model: { provider: "scripted", steps: [{ text: "resumed answer" }] } });
// A resume that ends without a message: its one model call refused for good (a 401), so the
// stream's last message stays the old run's and the late end's check does not show it behind.
const REFUSED = parseAgentConfig({ model: { provider: "scripted", steps: [{ fault: "rejected" }] } });

describe("a sweeper that wakes after another resumed the session", () => {
  let fleet: FleetEnv;
  let queues: RunQueues;
  let worker: WorkerProcess | undefined;

  beforeAll(async () => {
    fleet = await createFleetEnv("sweepstaleend");
    queues = new RunQueues(fleet.redis, fleet.config.prefix);
  });
  afterAll(async () => {
    worker?.child.kill("SIGKILL");
    if (worker) await worker.exited;
    await queues?.close();
    await fleet?.close();
  });

  function sweeper(events: EventWriter, runEnded: SweeperDeps["runEnded"]): Sweeper {
    const queries = new SessionQueries(fleet.database);
    return new Sweeper(
      {
        prefix: fleet.config.prefix,
        redis: fleet.redis,
        lease: new SessionLease(fleet.redis, fleet.config.prefix, fleet.config.leaseTtlMs),
        queries,
        sweeps: new SweepQueries(fleet.database),
        queues,
        metrics: createMetrics("sweeper"),
        resumes: new AutomaticResumes(fleet.database, DEFAULT_RESUME_POLICY, createMetrics("resumes")),
        log: { info() {}, debug() {}, warn() {} },
        ...(runEnded ? { runEnded } : {}),
        runEndMissing: (sessionId) => events.missingRunEnd(fleet.database, sessionId, 0),
      },
      { startGraceMs: 0 },
    );
  }

  /**
   * The old run's ends in the stream, and the resume's, once the first sweeper, woken after the
   * resume ended, wrote its own; `agent` runs the resume.
   */
  async function endsAfterThaw(
    agent: typeof AGENT,
  ): Promise<{ completions: unknown[]; runId: string; resumeId: string }> {
    const { sql } = fleet.database;
    const queries = new SessionQueries(fleet.database);
    const { id } = await queries.createSession({
      agent,
      messages: [{ role: "user", content: "question" }],
    });
    await sql`update sessions set run_started = true where id = ${id}`;
    const ghost = `ghost-${randomUUID().slice(0, 8)}`;
    const runId = randomUUID();
    await sql`
      insert into runs (id, session_id, kind, trigger, status, worker_id, started_at, job_id)
      values (${runId}, ${id}, 'run', 'api', 'running', ${ghost}, now() - interval '1 minute',
              ${QUEUES.runs.jobId({ sessionId: id, runId })})`;
    const events = new EventWriter(fleet.redis, fleet.config.prefix);

    // The first sweeper ends the run, then stops before its end event, for as long as the test says.
    let entered!: () => void;
    const frozen = new Promise<void>((resolve) => {
      entered = resolve;
    });
    let thaw!: () => void;
    const thawed = new Promise<void>((resolve) => {
      thaw = resolve;
    });
    const first = sweeper(events, async (sessionId, endedRunId, outcome, through) => {
      entered();
      await thawed;
      await events.writeAfterSync(
        fleet.database,
        sessionId,
        [{ type: "RUN_COMPLETED", runId: endedRunId, outcome }],
        through,
      );
    });
    const firstPass = first.sweepAbandoned(new Set([ghost]));
    await frozen;
    await fleet.redis.del(first.lockKey(id)); // its lock lapsed while it was stopped

    const second = sweeper(events, async (sessionId, endedRunId, outcome, through) => {
      await events.writeAfterSync(
        fleet.database,
        sessionId,
        [{ type: "RUN_COMPLETED", runId: endedRunId, outcome }],
        through,
      );
    });
    expect(await second.sweepInterrupted()).toEqual({ resumed: 1, parked: 0 });
    worker ??= await fleet.spawnWorker();
    const ended = async () => {
      const rows = await sql<{ n: number }[]>`
        select count(*)::int as n from runs where session_id = ${id} and kind = 'resume' and status = 'ended'`;
      return rows[0]!.n === 1;
    };
    await waitFor(ended, 60_000, "the resume to end");
    const key = eventStreamKey(fleet.config.prefix, id);
    const completions = async () =>
      (await fleet.redis.xrange(key, "-", "+"))
        .map(
          ([, fields]) => JSON.parse(fields[fields.indexOf("data") + 1]!) as { type: string; runId?: string },
        )
        .filter((e) => e.type === "RUN_COMPLETED")
        .map((e) => e.runId);
    await waitFor(async () => (await completions()).length === 2, 30_000, "both runs' ends in the stream");
    const [resume] = await sql<
      { id: string }[]
    >`select id from runs where session_id = ${id} and kind = 'resume'`;

    thaw();
    expect(await firstPass).toBe(1);
    return { completions: await completions(), runId, resumeId: resume!.id };
  }

  it("does not write the old run's end a second time", async () => {
    const { completions, runId, resumeId } = await endsAfterThaw(AGENT);
    expect(completions).toEqual([runId, resumeId]);
  }, 120_000);

  it("does not write it after a resume that stored no message", async () => {
    const { completions, runId, resumeId } = await endsAfterThaw(REFUSED);
    expect(completions).toEqual([runId, resumeId]);
  }, 120_000);
});
