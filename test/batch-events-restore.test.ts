/**
 * A batch's event stream when Postgres is restored to an earlier point while Redis keeps its
 * newer state (README, Restoring from backups; src/producer/batch-stream-check.ts). The batch
 * ended after the backup point: before the fix its stream kept the lost timeline's
 * SESSION_ENDED and BATCH_COMPLETED (with the lost counts), streamed at once to a reader from
 * the start while `GET /v1/batches/:id` said `running`, and its done set kept the restored
 * timeline's ends from being written. Now the stream is dropped, a place in it gets 410, and
 * the events come again as Postgres has them.
 */
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import type { FleetClient } from "../src/producer/client.js";
import { createFleetEnv, type FleetEnv, waitFor } from "./support/fleet-env.js";
import { readSse } from "./support/sse.js";

const AGENT = { model: { provider: "scripted" as const, steps: [{ text: "done" }] } };
const TABLES = ["batches", "sessions", "runs", "messages"] as const;

describe("batch event streams after a restore from backup", () => {
  let fleet: FleetEnv;
  let client: FleetClient;
  let base: string;

  beforeAll(async () => {
    fleet = await createFleetEnv("batcheventsrestore");
    const started = await fleet.startApi();
    client = started.client;
    base = started.api.url;
  }, 60_000);
  afterAll(async () => {
    await fleet?.close();
  });

  it("Postgres restored to before the batch ended: the stream is dropped and written again from Postgres", async () => {
    const batch = await client.createBatch(
      ["a", "b", "c"].map((customId) => ({ agent: AGENT, input: `hello ${customId}`, customId })),
    );
    const sessionIds = batch.sessions.map((s) => s.id).sort();
    // The backup: the batch as it is now, before any worker ran it.
    const sql = fleet.database.sql;
    await sql`create table backup_batches as select * from batches where id = ${batch.id}`;
    await sql`create table backup_sessions as select * from sessions where batch_id = ${batch.id}`;
    await sql`create table backup_runs as select * from runs where session_id in (select id from backup_sessions)`;
    await sql`create table backup_messages as select * from messages where session_id in (select id from backup_sessions)`;

    const url = `${base}/v1/batches/${batch.id}/events`;
    let worker = await fleet.spawnWorker();
    const lost = await readSse(`${url}?after=0-0`, {
      stop: (e) => e.type === "BATCH_COMPLETED",
      timeoutMs: 30_000,
    });
    expect(lost.events.map((e) => e.type)).toEqual([
      "SESSION_ENDED",
      "SESSION_ENDED",
      "SESSION_ENDED",
      "BATCH_COMPLETED",
    ]);
    const place = lost.events.at(-1)!.id;

    // The operator stops the fleet and restores Postgres; Redis keeps its newer state.
    worker.child.kill("SIGTERM");
    await worker.exited;
    await sql`delete from sessions where batch_id = ${batch.id}`;
    await sql`delete from batches where id = ${batch.id}`;
    for (const table of TABLES) {
      const columns = await sql<{ name: string }[]>`
        select column_name as name from information_schema.columns
         where table_schema = 'public' and table_name = ${table} and is_generated = 'NEVER'`;
      const list = columns.map((c) => `"${c.name}"`).join(", ");
      await sql.unsafe(`insert into ${table} (${list}) select ${list} from backup_${table}`);
    }
    const restoredAt = Date.now();
    const restored = await client.getBatch(batch.id);
    expect(restored.status).toBe("running");
    expect(restored.counts.completed).toBe(0);

    // A reader from the start gets nothing Postgres does not have: no event at all yet.
    const early = await readSse(`${url}?after=0-0`, { stop: () => true, timeoutMs: 2_000 }).catch(() => null);
    expect(early?.events ?? []).toEqual([]);
    // A place in the lost stream is gone.
    const again = await readSse(url, { after: place, stop: () => true });
    expect(again.status, JSON.stringify(again.body)).toBe(410);
    expect(again.body).toMatchObject({ error: { code: "gone", reason: "expired" } });

    // The fleet runs the batch again (the sweeper queues the runs whose jobs Redis has as finished).
    worker = await fleet.spawnWorker();
    await fleet.spawnSweeper();
    await waitFor(
      async () => (await client.getBatch(batch.id)).status === "ended",
      45_000,
      "the batch ends again",
    );
    const now = await readSse(`${url}?after=0-0`, {
      stop: (e) => e.type === "BATCH_COMPLETED",
      timeoutMs: 20_000,
    });
    const ended = now.events.filter((e) => e.type === "SESSION_ENDED");
    expect(ended.map((e) => e.data.sessionId).sort()).toEqual(sessionIds);
    // Every event was written after the restore, from Postgres: BATCH_COMPLETED says what GET says.
    for (const event of now.events)
      expect(Number(event.id.split("-")[0])).toBeGreaterThanOrEqual(restoredAt - 5);
    const final = await client.getBatch(batch.id);
    expect(now.events.at(-1)).toMatchObject({
      type: "BATCH_COMPLETED",
      data: { status: final.status, counts: final.counts },
    });
  }, 120_000);
  it("a session of the batch deleted on request does not drop the batch's stream", async () => {
    // Its runs go with it, so its SESSION_ENDED names a run Postgres no longer has — as after a
    // restore — but Postgres no longer has the session either: that is a delete, not a restore.
    const batch = await client.createBatch(
      ["x", "y"].map((customId) => ({ agent: AGENT, input: `hello ${customId}`, customId })),
    );
    await fleet.spawnWorker();
    const url = `${base}/v1/batches/${batch.id}/events`;
    const first = await readSse(`${url}?after=0-0`, {
      stop: (e) => e.type === "BATCH_COMPLETED",
      timeoutMs: 30_000,
    });
    expect(first.events.map((e) => e.type)).toEqual(["SESSION_ENDED", "SESSION_ENDED", "BATCH_COMPLETED"]);
    await client.deleteSession(batch.sessions[0]!.id);

    // A reader resuming after the first event keeps its place (no 410), and one from the start
    // reads the same stream as before.
    const resumed = await readSse(url, {
      after: first.events[0]!.id,
      stop: (e) => e.type === "BATCH_COMPLETED",
      timeoutMs: 10_000,
    });
    expect(resumed.status, JSON.stringify(resumed.body)).toBe(200);
    expect(resumed.events.map((e) => e.id)).toEqual(first.events.slice(1).map((e) => e.id));
    const again = await readSse(`${url}?after=0-0`, {
      stop: (e) => e.type === "BATCH_COMPLETED",
      timeoutMs: 10_000,
    });
    expect(again.events.map((e) => e.id)).toEqual(first.events.map((e) => e.id));
  }, 60_000);
});
