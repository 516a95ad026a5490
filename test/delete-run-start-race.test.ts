/**
 * A delete meets a worker starting the session's run (startRun marks it running under the
 * session's row lock): the delete waits for the row, and what it reports of the session's
 * runs must be what was committed when it deleted — the run `running` — or the worker is
 * not told to stop (the cancel channel names running sessions only) and its model call or
 * tool goes on to its end.
 */
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import type { FleetClient } from "../src/producer/client.js";
import { DataDeletion } from "../src/shared/store/data-deletion.js";
import { createFleetEnv, type FleetEnv } from "./support/fleet-env.js";

const AGENT = { model: { provider: "scripted" as const, steps: [{ text: "done" }] } };

describe("a delete against a run's start", () => {
  let fleet: FleetEnv;
  let client: FleetClient;

  beforeAll(async () => {
    fleet = await createFleetEnv("deleterunstart");
    ({ client } = await fleet.startApi());
  }, 60_000);
  afterAll(async () => {
    await fleet?.close();
  });

  /** Runs `remove` while a worker's start holds the session's row, then lets the start commit. */
  async function duringStart<T>(sessionId: string, runId: string, remove: () => Promise<T>): Promise<T> {
    const { sql } = fleet.database;
    let release!: () => void;
    const held = new Promise<void>((resolve) => (release = resolve));
    let locked!: () => void;
    const isLocked = new Promise<void>((resolve) => (locked = resolve));
    // What startRun does in one statement: the session's row, then the run marked running.
    const start = sql.begin(async (tx) => {
      await tx`select id from sessions where id = ${sessionId} for no key update`;
      await tx`update runs set status = 'running', started_at = now(), worker_id = 'w' where id = ${runId}`;
      await tx`update sessions set run_started = true, updated_at = now() where id = ${sessionId}`;
      locked();
      await held;
    });
    await isLocked;
    const removing = remove();
    // The delete's statement has begun and waits for the row.
    for (;;) {
      const waiting = await sql`
        select 1 from pg_stat_activity where datname = current_database() and wait_event_type = 'Lock'`;
      if (waiting.length > 0) break;
      await new Promise((r) => setTimeout(r, 5));
    }
    release();
    await start;
    return removing;
  }

  it("DELETE /v1/sessions/:id reports the run the start committed as running", async () => {
    const { id } = await client.createSession({ agent: AGENT });
    const { runId } = await client.send(id, "hello");
    const deleted = await duringStart(id, runId, () =>
      new DataDeletion(fleet.database).deleteSession("default", id),
    );
    expect(deleted?.sessionIds).toEqual([id]);
    expect(deleted?.runs.map((r) => [r.id, r.status])).toEqual([[runId, "running"]]);
  });

  it("DELETE /v1/batches/:id reports a run started while its chunk ran as running", async () => {
    const { sql } = fleet.database;
    // Sessions of the batch before it in id order, each held by another transaction: the
    // chunk passes over them (skip locked) for a while before it reaches the session. Made
    // once, as copies of the first batch's session, and moved to each attempt's batch.
    const first = await client.createBatch([{ agent: AGENT, input: "go" }]);
    const columns = (
      await sql<{ name: string }[]>`
        select column_name as name from information_schema.columns
         where table_name = 'sessions' and table_schema = current_schema() and is_generated = 'NEVER'
           and column_name <> 'id'`
    ).map((c) => `"${c.name}"`);
    await sql.unsafe(
      `insert into sessions (id, ${columns.join(", ")})
       select '0-filler-' || g, ${columns.map((c) => `s.${c}`).join(", ")}
         from sessions s, generate_series(1, 40000) g where s.id = $1`,
      [first.sessions[0]!.id],
    );
    let release!: () => void;
    const held = new Promise<void>((resolve) => (release = resolve));
    let locked!: () => void;
    const isLocked = new Promise<void>((resolve) => (locked = resolve));
    // FOR KEY SHARE: the chunk's FOR UPDATE skips them; moving them to a batch (no key update) does not wait.
    const holder = sql.begin(async (tx) => {
      await tx`select 1 from sessions where id like '0-filler-%' for key share`;
      locked();
      await held;
    });
    await isLocked;
    const store = new DataDeletion(fleet.database);
    const outcomes: string[] = [];
    try {
      // The start is meant to commit while the chunk passes over the fillers; on a loaded
      // machine the chunk may reach the session first (then the start finds it gone and
      // starts nothing, and `queued` is right): such an attempt is checked and tried again.
      for (let attempt = 0; attempt < 4 && !outcomes.includes("started first"); attempt++) {
        const batch = attempt === 0 ? first : await client.createBatch([{ agent: AGENT, input: "go" }]);
        const [session] = batch.sessions;
        const { id } = session!;
        const runId = session!.runId!;
        await sql`update sessions set batch_id = ${batch.id} where id like '0-filler-%'`;
        // Marked as an API of the last release marked it (its sessions not cancelled with it), the
        // state an upgrade finds: the chunk must still see a start committed while it ran.
        await sql`update batches set deleted_at = now(), open = false where id = ${batch.id}`;
        let settled = false;
        const chunk = store.purgeBatchChunk(batch.id, 10).finally(() => {
          settled = true;
        });
        while (!settled) {
          const active = await sql`
            select 1 from pg_stat_activity where state = 'active' and query like '%for update of s skip locked%'
               and query not like '%pg_stat_activity%'`;
          if (active.length > 0) break;
        }
        expect(settled, "the chunk was seen reading").toBe(false);
        // A worker's startRun, in one statement, while the chunk reads.
        const started = await sql`
          with cur as (select id from sessions where id = ${id} for no key update),
               r as (update runs set status = 'running', started_at = now(), worker_id = 'w'
                      where id = ${runId} and exists (select 1 from cur) returning id)
          update sessions set run_started = true, updated_at = now() where id = ${id} and exists (select 1 from r)
          returning id`;
        const deleted = await chunk;
        expect(deleted.sessionIds).toEqual([id]);
        const startedFirst = started.length === 1;
        outcomes.push(startedFirst ? "started first" : "chunk first");
        expect(deleted.runs.map((r) => [r.id, r.status])).toEqual([
          [runId, startedFirst ? "running" : "queued"],
        ]);
      }
      expect(outcomes, "no attempt's start committed while the chunk read").toContain("started first");
    } finally {
      release();
      await holder;
    }
  }, 120_000);
});
