/**
 * A session cancel meets new work for the same session (contracts §9: "queued runs are
 * dropped"; a new message or an explicit resume re-opens a cancelled session). Every writer
 * takes the session's row before its runs' rows, as the cancel does (batches.ts):
 * - a run queued while a cancel runs is either dropped by it or re-opens the session, never
 *   left queued on the cancelled session (it stayed so for ever: its worker's claim skips a
 *   cancelled session; a storm of sends and cancels on 4 sessions left 10 accepted sends so);
 * - a worker starting a queued run does not deadlock with the cancel dropping it (2 of 96
 *   cancels answered 500 `deadlock detected` in that storm, and workers' jobs failed alike).
 */
import { randomUUID } from "node:crypto";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import type { FleetClient } from "../src/producer/client.js";
import { parseAgentConfig } from "../src/shared/agent-config.js";
import { FencedWrites } from "../src/shared/store/fenced-writes.js";
import { SessionQueries } from "../src/shared/store/session-queries.js";
import { createFleetEnv, type FleetEnv } from "./support/fleet-env.js";

const AGENT = { model: { provider: "scripted" as const, steps: [{ text: "ok" }] } };
const sleep = (ms: number) => new Promise((resolve) => setTimeout(resolve, ms));

describe("a cancel against new work for its session", () => {
  let fleet: FleetEnv;
  let client: FleetClient;

  beforeAll(async () => {
    fleet = await createFleetEnv("cancellockorder");
    ({ client } = await fleet.startApi());
  }, 60_000);
  afterAll(() => fleet?.close());

  /** A session interrupted mid-turn, nothing queued: a resume is `call_model`, a cancel cancels it. */
  async function interrupted(): Promise<string> {
    const { id } = await client.createSession({ agent: AGENT, messages: [{ role: "user", content: "hi" }] });
    await fleet.database
      .sql`update sessions set run_started = true, tail_state = 'awaiting_model' where id = ${id}`;
    return id;
  }

  it("leaves no run queued on the session it cancelled, for a run inserted while it ran", async () => {
    const { sql } = fleet.database;
    const sessionId = await interrupted();
    // Another writer's resume, not yet committed: the API's insert of its own resume waits for
    // it (the one-resume-per-session index), so that insert is in flight while the cancel runs.
    let release!: () => void;
    const held = new Promise<void>((resolve) => (release = resolve));
    let inserted!: () => void;
    const isInserted = new Promise<void>((resolve) => (inserted = resolve));
    const other = sql
      .begin(async (tx) => {
        await tx`insert into runs (id, session_id, tenant, kind, trigger, resume_kind)
                 values (${randomUUID()}, ${sessionId}, 'default', 'resume', 'sweeper', 'call_model')`;
        inserted();
        await held;
        throw new Error("rolled back");
      })
      .catch(() => {});
    await isInserted;
    const resuming = client.resume(sessionId).then(
      (answer) => ({ ok: true as const, answer }),
      (error: unknown) => ({ ok: false as const, error }),
    );
    await sleep(300); // the API's resume waits on the other writer's insert
    const cancelling = client.cancelSession(sessionId);
    await sleep(300); // the cancel runs meanwhile (or waits for the resume's transaction)
    release();
    await other;
    const [resumed, cancelled] = await Promise.all([resuming, cancelling]);
    expect(resumed.ok).toBe(true);
    expect(cancelled.cancelled).toBe(true);
    // The resume committed first and the cancel dropped it: nothing waits on the session.
    const runs = await sql<{ status: string; ended_reason: string | null }[]>`
      select status, ended_reason from runs where session_id = ${sessionId}`;
    expect(runs).toEqual([{ status: "ended", ended_reason: "cancelled" }]);
    expect((await client.getSession(sessionId)).status).toBe("cancelled");
    expect(await client.resumePoint(sessionId)).toMatchObject({ resumable: true });
  }, 30_000);

  it("a new message after the cancel re-opens the session it read as active", async () => {
    const sessionId = await interrupted();
    const queries = new SessionQueries(fleet.database);
    // Read before the cancel, committed after it: the run re-opens the session.
    await client.cancelSession(sessionId);
    const { run } = await queries.createRun(
      { sessionId, kind: "run", trigger: "api", input: "again" },
      { unpark: true, tenant: "default" },
    );
    expect(run.status).toBe("queued");
    expect((await client.getSession(sessionId)).status).not.toBe("cancelled");
  }, 30_000);

  it("a worker's run start waits for the cancel holding the session instead of deadlocking", async () => {
    const { sql } = fleet.database;
    const queries = new SessionQueries(fleet.database);
    const writes = new FencedWrites(fleet.database);
    const { id: sessionId } = await queries.createSession({ agent: parseAgentConfig(AGENT) });
    const { run } = await queries.createRun({ sessionId, kind: "run", trigger: "api", input: "go" });
    const claim = (await writes.claimSession(sessionId, "w1"))!;
    // The cancel's statements in its order (batches.ts `cancel`): the session's row, then the
    // queued runs; the worker's start comes between the two.
    const cancel = sql.begin(async (tx) => {
      await tx`select id from sessions where id = ${sessionId} for no key update`;
      const starting = writes
        .startRun(
          { sessionId, epoch: claim.epoch },
          { lastSeq: 0, lastStepSeq: null },
          { id: run.id, workerId: "w1", resumeKind: null },
          [{ role: "user", content: "go" }],
          "awaiting_model",
        )
        .then(
          (stored) => ({ ok: true as const, stored }),
          (error: unknown) => ({ ok: false as const, error: String(error) }),
        );
      await sleep(300); // the start has reached the session's row and waits for it
      await tx`update runs set status = 'ended', ended_reason = 'cancelled', ended_at = now()
                where session_id = ${sessionId} and status = 'queued'`;
      await tx`update sessions set status = 'cancelled' where id = ${sessionId}`;
      return { starting };
    });
    const cancelled = await cancel.then(
      (result) => ({ ok: true as const, starting: result }),
      (error: unknown) => ({ ok: false as const, error: String(error) }),
    );
    expect(cancelled).toMatchObject({ ok: true });
    // The start finds its run dropped: it appends nothing.
    if (!cancelled.ok) return;
    expect(await cancelled.starting.starting).toEqual({ ok: true, stored: null });
    const [row] = await sql<
      { n: number }[]
    >`select count(*)::int as n from messages where session_id = ${sessionId}`;
    expect(row!.n).toBe(0);
  }, 30_000);
});
