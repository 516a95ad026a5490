/**
 * A batch cancel that meets an automatic resume being queued (contracts §9: "queued runs are
 * dropped"; "never resumed automatically"): a worker died just before the cancel, and the
 * sweeper holds the session's row lock while it inserts the resume. The cancel waits for it
 * and then drops that resume too, instead of leaving it queued on the cancelled session
 * (reproduced against a running fleet: SIGKILL a worker, cancel its batch 300 ms later).
 */
import { randomUUID } from "node:crypto";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import type { FleetClient } from "../src/producer/client.js";
import { BatchStore } from "../src/shared/store/batches.js";
import { createFleetEnv, type FleetEnv } from "./support/fleet-env.js";

const AGENT = { model: { provider: "scripted" as const, steps: [{ text: "ok" }] } };

describe("batch cancel against a resume being queued", () => {
  let fleet: FleetEnv;
  let client: FleetClient;

  beforeAll(async () => {
    fleet = await createFleetEnv("cancelresumerace");
    ({ client } = await fleet.startApi());
  }, 60_000);
  afterAll(() => fleet?.close());

  it("drops the resume the sweeper committed while the cancel waited for the session", async () => {
    const { sql } = fleet.database;
    const batch = await client.createBatch([{ agent: AGENT }]);
    const sessionId = batch.sessions[0]!.id;
    // Its run crashed, mid-turn: the session is interrupted and not yet resumed.
    await sql`update sessions set run_started = true, tail_state = 'awaiting_model' where id = ${sessionId}`;
    const runId = randomUUID();
    let release!: () => void;
    const held = new Promise<void>((resolve) => (release = resolve));
    let locked!: () => void;
    const isLocked = new Promise<void>((resolve) => (locked = resolve));
    // The sweeper's transaction, as AutomaticResumes.schedule makes it: the session's row lock,
    // then the resume's insert.
    const sweeper = sql.begin(async (tx) => {
      await tx`select 1 from sessions where id = ${sessionId} for no key update`;
      locked();
      await held;
      await tx`insert into runs (id, session_id, tenant, kind, trigger, resume_kind)
               values (${runId}, ${sessionId}, 'default', 'resume', 'sweeper', 'call_model')`;
    });
    await isLocked;
    const cancelling = new BatchStore(fleet.database).cancel("default", { batchId: batch.id });
    await new Promise((resolve) => setTimeout(resolve, 300)); // the cancel waits for the lock
    release();
    await sweeper;
    const result = await cancelling;
    expect(result.sessionIds).toEqual([sessionId]);
    expect(result.dropped.map((d) => d.id)).toEqual([runId]);
    const [run] = await sql`select status, ended_reason from runs where id = ${runId}`;
    expect(run).toEqual({ status: "ended", ended_reason: "cancelled" });
    // Nothing is left waiting on the cancelled session.
    const [left] =
      await sql`select count(*)::int as n from runs where session_id = ${sessionId} and status <> 'ended'`;
    expect(left).toEqual({ n: 0 });
    expect((await client.getSession(sessionId)).status).toBe("cancelled");
  }, 30_000);
});
