/**
 * Event streams when Postgres or Redis is restored from a backup, so that the two stores
 * disagree about how far a session got (README, Restoring from backups).
 *
 * - Postgres restored to an earlier point while Redis keeps its newer state: the stream holds
 *   messages Postgres no longer has, under seqs the session now fills with other messages.
 *   Before the fix, the writers skipped the new ones as "already there": a reader from the
 *   start got the lost messages and never the stored ones, and a reader resuming after the
 *   last event it had was served the next run without its messages (a gap).
 * - Redis restored from an older RDB snapshot: the stream is behind Postgres and its writers
 *   send the missing messages again, under new ids. Before the fix, a reader resuming with an
 *   id from before the restore (an id the restored stream never had) was served those
 *   messages a second time.
 *
 * In both cases a reader whose place the stream lost gets 410 (contracts §7) and then reads
 * every stored message exactly once from the start.
 */
import type { ChildProcess } from "node:child_process";
import { copyFileSync, mkdtempSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import type { FleetClient, FleetEvent } from "../src/producer/client.js";
import { createFleetEnv, type FleetEnv, type WorkerProcess } from "./support/fleet-env.js";
import { freePort, startRedis, stopRedis } from "./support/private-redis.js";
import { readSse } from "./support/sse.js";

const AGENT = {
  model: {
    provider: "scripted" as const,
    steps: [{ text: "first" }, { text: "second" }, { text: "third" }, { text: "fourth" }],
  },
};

type Seen = { seq: number; content: string };
const messagesOf = (events: FleetEvent[]): Seen[] =>
  events.flatMap((e) => {
    if (e.type !== "MESSAGE") return [];
    const message = e.data.message as { seq: number; content: string };
    return [{ seq: message.seq, content: message.content }];
  });

describe("event streams after a restore from backup", () => {
  let fleet: FleetEnv;
  let client: FleetClient;
  let base: string;
  let redis: ChildProcess;
  let port: number;
  let worker: WorkerProcess;
  const redisDir = mkdtempSync(join(tmpdir(), "fleet-restore-redis-"));

  const startOurRedis = () => startRedis(port, ["--dir", redisDir]);
  const stopWorker = async () => {
    worker.child.kill("SIGTERM");
    await worker.exited;
  };
  const stored = async (id: string): Promise<Seen[]> =>
    (await client.getSession(id)).messages.map((m) => ({ seq: m.seq, content: m.content as string }));
  /** Every event from the start until the RUN_COMPLETED of `runId`. */
  const fromStart = (id: string, runId: string) =>
    readSse(`${base}/v1/sessions/${id}/events?after=0-0`, {
      stop: (event) => event.type === "RUN_COMPLETED" && event.data.runId === runId,
    });
  /**
   * `fromStart` as a client reads after a restore. The run ends in Postgres before its worker's
   * last event writes reach Redis (they are not waited for), so a read from the start may begin
   * on the stream as it was before the restore; when the worker then drops and rebuilds it, that
   * read is ended before the run's end (its place is gone), and the client reads from the start
   * again. Without the rebuild the first read runs on to the run's end with the lost messages.
   */
  const settledFromStart = async (id: string, runId: string) => {
    for (let attempt = 1; ; attempt++) {
      const read = await fromStart(id, runId);
      const end = read.events.at(-1);
      if ((end?.type === "RUN_COMPLETED" && end.data.runId === runId) || attempt === 5) return read;
    }
  };

  beforeAll(async () => {
    port = await freePort();
    redis = await startOurRedis();
    fleet = await createFleetEnv("eventsrestore", { redisUrl: `redis://127.0.0.1:${port}` });
    const started = await fleet.startApi();
    client = started.client;
    base = started.api.url;
    worker = await fleet.spawnWorker();
  });
  afterAll(async () => {
    await fleet?.close();
    if (redis) await stopRedis(redis);
  });

  it("Postgres restored to an earlier point: the stream is rebuilt from what is stored, old places get 410", async () => {
    const { id } = await client.createSession({ agent: AGENT });
    const url = `${base}/v1/sessions/${id}/events`;
    await client.waitForRun((await client.send(id, "one")).runId, { timeoutMs: 15_000 });
    // The backup: this session's rows as they are now (what pg_restore would bring back).
    const sql = fleet.database.sql;
    await sql`create table backup_sessions as select * from sessions where id = ${id}`;
    await sql`create table backup_runs as select * from runs where session_id = ${id}`;
    await sql`create table backup_messages as select * from messages where session_id = ${id}`;

    const lost = (await client.send(id, "two")).runId;
    await client.waitForRun(lost, { timeoutMs: 15_000 });
    const before = await fromStart(id, lost);
    expect(messagesOf(before.events).map((m) => m.seq)).toEqual([1, 2, 3, 4]);
    const place = before.events.at(-1)!.id;
    // A reader open across the restore, positioned after everything it had.
    let next = "";
    const open = readSse(url, {
      after: place,
      stop: (event) => event.type === "RUN_COMPLETED" && event.data.runId === next,
      timeoutMs: 30_000,
    });

    // The operator stops the fleet and restores Postgres; Redis keeps its newer state.
    await stopWorker();
    await sql`delete from sessions where id = ${id}`;
    for (const table of ["sessions", "runs", "messages"]) {
      const columns = await sql<{ name: string }[]>`
        select column_name as name from information_schema.columns
         where table_schema = 'public' and table_name = ${table} and is_generated = 'NEVER'`;
      const list = columns.map((c) => `"${c.name}"`).join(", ");
      await sql.unsafe(`insert into ${table} (${list}) select ${list} from backup_${table}`);
    }
    expect((await stored(id)).map((m) => m.seq)).toEqual([1, 2]);
    worker = await fleet.spawnWorker();

    next = (await client.send(id, "three")).runId;
    await client.waitForRun(next, { timeoutMs: 15_000 });
    const now = await stored(id);
    expect(now).toEqual([
      { seq: 1, content: "one" },
      { seq: 2, content: "first" },
      { seq: 3, content: "three" },
      { seq: 4, content: "second" },
    ]);
    // From the start: exactly the stored messages, none of the lost ones.
    expect(messagesOf((await settledFromStart(id, next)).events)).toEqual(now);
    // A place in the lost history: 410, not the next run without its messages.
    const again = await readSse(url, { after: place, stop: () => true });
    expect(again.status).toBe(410);
    expect(again.body).toMatchObject({ error: { code: "gone", reason: "expired" } });
    // The open reader ended rather than read on past a gap.
    const read = await open;
    expect(read.events.some((e) => e.type === "RUN_COMPLETED" && e.data.runId === next)).toBe(false);
  }, 90_000);

  it("Redis restored from an older snapshot: a place from after the snapshot gets 410, never a message twice", async () => {
    const { id } = await client.createSession({ agent: AGENT });
    const url = `${base}/v1/sessions/${id}/events`;
    await client.waitForRun((await client.send(id, "one")).runId, { timeoutMs: 15_000 });
    await fleet.redis.save();
    const snapshot = join(redisDir, "backup.rdb");
    copyFileSync(join(redisDir, "dump.rdb"), snapshot);

    const second = (await client.send(id, "two")).runId;
    await client.waitForRun(second, { timeoutMs: 15_000 });
    const before = await fromStart(id, second);
    expect(messagesOf(before.events).map((m) => m.seq)).toEqual([1, 2, 3, 4]);
    const place = before.events.at(-1)!.id;
    let third = "";
    const open = readSse(url, {
      after: place,
      stop: (event) => event.type === "RUN_COMPLETED" && event.data.runId === third,
      timeoutMs: 30_000,
    });
    await new Promise((r) => setTimeout(r, 300));

    // Redis comes back from the older snapshot; Postgres keeps everything.
    await stopRedis(redis);
    copyFileSync(snapshot, join(redisDir, "dump.rdb"));
    redis = await startOurRedis();
    third = (await client.send(id, "three")).runId;
    await client.waitForRun(third, { timeoutMs: 30_000 });

    // The open reader never gets a message it had.
    const read = messagesOf((await open).events);
    expect(read.filter((m) => m.seq <= 4)).toEqual([]);
    const again = await readSse(url, { after: place, stop: () => true });
    expect(again.status).toBe(410);
    expect(messagesOf((await settledFromStart(id, third)).events)).toEqual(await stored(id));
  }, 90_000);
});
