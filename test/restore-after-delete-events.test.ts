/**
 * Postgres restored to a point before a session was deleted (README, Restoring from backups:
 * "a session or batch deleted after the backup's moment is back after the restore"), Redis
 * kept as the README says. The delete left the session's seq key a tombstone in Redis
 * (deletion-cleanup.ts: 60 s, or FLEET_EVENTS_MAX_AGE_MS — a day — when a run had not ended),
 * and the event script writes nothing for a tombstoned session. Before the fix, the restored
 * session ran (its run completed in Postgres) while its event stream stayed dead: a reader from
 * the start got SESSION_DELETED (or nothing at all once the stream expired) for a session that
 * `GET /v1/sessions/:id` answered, and never the restored messages nor the new run — for up to
 * a day. A restore is exactly how an accidental delete is undone. Now a writer that meets a
 * tombstone looks in Postgres: a session that is there again has its tombstone and the deleted
 * stream dropped, and its stream is written again from what is stored.
 */
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import type { FleetClient } from "../src/producer/client.js";
import { eventStreamKey, seqKey } from "../src/shared/events.js";
import { createFleetEnv, type FleetEnv, type WorkerProcess } from "./support/fleet-env.js";
import { readSse } from "./support/sse.js";

const AGENT = { model: { provider: "scripted" as const, steps: [{ text: "first" }, { text: "second" }] } };

describe("a session deleted after the backup point, brought back by the restore", () => {
  let fleet: FleetEnv;
  let client: FleetClient;
  let base: string;
  let worker: WorkerProcess;

  beforeAll(async () => {
    fleet = await createFleetEnv("restoreafterdelete");
    const started = await fleet.startApi();
    client = started.client;
    base = started.api.url;
    worker = await fleet.spawnWorker();
  }, 60_000);
  afterAll(async () => {
    await fleet?.close();
  });

  it("streams its stored messages and its next run, not SESSION_DELETED", async () => {
    const { id } = await client.createSession({ agent: AGENT });
    await client.waitForRun((await client.send(id, "one")).runId, { timeoutMs: 20_000 });
    // The backup: this session's rows as they are now (what pg_restore would bring back).
    const { sql } = fleet.database;
    for (const table of ["sessions", "runs", "messages"])
      await sql.unsafe(
        `create table backup_${table} as select * from ${table} where ${table === "sessions" ? "id" : "session_id"} = $1`,
        [id],
      );
    // After the backup point, the session is deleted (by mistake: the restore undoes it).
    // A reader's place in the stream of the lost timeline: the end of the first run.
    const first = await readSse(`${base}/v1/sessions/${id}/events?after=0-0`, {
      stop: (event) => event.type === "RUN_COMPLETED",
    });
    const oldPlace = first.events.at(-1)!.id;
    await client.deleteSession(id);

    // The operator stops the fleet and restores Postgres; Redis keeps what it holds.
    worker.child.kill("SIGTERM");
    await worker.exited;
    for (const table of ["sessions", "runs", "messages"]) {
      const columns = await sql<{ name: string }[]>`
        select column_name as name from information_schema.columns
         where table_schema = 'public' and table_name = ${table} and is_generated = 'NEVER'`;
      const list = columns.map((c) => `"${c.name}"`).join(", ");
      await sql.unsafe(`insert into ${table} (${list}) select ${list} from backup_${table}`);
    }
    // The delete's outbox row (onSessionDeleted hooks owed) is not in the backup either.
    await sql`delete from session_deletions where session_id = ${id}`;
    expect((await client.getSession(id)).messages.map((m) => m.content)).toEqual(["one", "first"]);
    worker = await fleet.spawnWorker();

    const next = (await client.send(id, "two")).runId;
    await client.waitForRun(next, { timeoutMs: 20_000 });
    const stored = (await client.getSession(id)).messages.map((m) => ({ seq: m.seq, content: m.content }));
    expect(stored).toEqual([
      { seq: 1, content: "one" },
      { seq: 2, content: "first" },
      { seq: 3, content: "two" },
      { seq: 4, content: "second" },
    ]);
    // The worker's own writes found the tombstone, saw the session in Postgres and dropped it.
    expect(await fleet.redis.hexists(seqKey(fleet.config.prefix, id), "deleted")).toBe(0);
    const read = await readSse(`${base}/v1/sessions/${id}/events?after=0-0`, {
      stop: (event) =>
        event.type === "SESSION_DELETED" || (event.type === "RUN_COMPLETED" && event.data.runId === next),
      timeoutMs: 20_000,
    });
    expect(read.status, JSON.stringify(read.body)).toBe(200);
    expect(read.events.map((e) => e.type)).not.toContain("SESSION_DELETED");
    const messages = read.events.flatMap((e) => {
      if (e.type !== "MESSAGE") return [];
      const message = e.data.message as { seq: number; content: string };
      return [{ seq: message.seq, content: message.content }];
    });
    expect(messages).toEqual(stored);
    expect(read.events.at(-1)).toMatchObject({ type: "RUN_COMPLETED", data: { runId: next } });
    // A place in the deleted stream is gone: 410, as any place in a stream since lost.
    const resumed = await readSse(`${base}/v1/sessions/${id}/events`, { after: oldPlace, stop: () => true });
    expect(resumed.status).toBe(410);
  }, 120_000);

  it("a reader finds the restored session's stream written again, when the deleted one expired and no worker wrote", async () => {
    // No worker: the session's run stays queued, so its delete keeps the tombstone a day.
    worker.child.kill("SIGTERM");
    await worker.exited;
    const { id } = await client.createSession({
      agent: AGENT,
      messages: [
        { role: "user", content: "imported" },
        { role: "assistant", content: "answered", stopReason: "end_turn" },
      ],
    });
    await client.send(id, "queued");
    const { sql } = fleet.database;
    for (const table of ["sessions", "runs", "messages"])
      await sql.unsafe(
        `create table backup2_${table} as select * from ${table} where ${table === "sessions" ? "id" : "session_id"} = $1`,
        [id],
      );
    await client.deleteSession(id);
    expect(await fleet.redis.pttl(seqKey(fleet.config.prefix, id))).toBeGreaterThan(3_600_000);
    // 60 s later the deleted stream has expired; its tombstone stays.
    await fleet.redis.del(eventStreamKey(fleet.config.prefix, id));
    for (const table of ["sessions", "runs", "messages"]) {
      const columns = await sql<{ name: string }[]>`
        select column_name as name from information_schema.columns
         where table_schema = 'public' and table_name = ${table} and is_generated = 'NEVER'`;
      const list = columns.map((c) => `"${c.name}"`).join(", ");
      await sql.unsafe(`insert into ${table} (${list}) select ${list} from backup2_${table}`);
    }
    await sql`delete from session_deletions where session_id = ${id}`;
    const read = await readSse(`${base}/v1/sessions/${id}/events?after=0-0`, {
      stop: (event) => event.type === "MESSAGE" || event.type === "SESSION_DELETED",
      timeoutMs: 20_000,
    });
    expect(read.status).toBe(200);
    expect(read.events.at(-1)).toMatchObject({
      type: "MESSAGE",
      data: { message: { seq: 1, content: "imported" } },
    });
  }, 60_000);
});
