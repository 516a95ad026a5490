/**
 * A session's runs start in the order they were queued under the session's row lock, not in
 * the order their transactions began. `now()` is a transaction's start: a message's run whose
 * transaction began before an explicit resume was accepted, but took the session's row after
 * it, was ordered first by `created_at`; it ran first, completed the history, and the accepted
 * resume ended `nothing_to_resume` (resume-semantics §2, contracts §12: an accepted resume
 * resumes). Here the message's transaction is held on purpose, after it began and before it
 * takes the row, on its tenant's advisory lock (FLEET_TENANT_MAX_ACTIVE_SESSIONS's), which the
 * runs queued meanwhile do not take. Every place that picks a session's next run is checked.
 */
import { randomUUID } from "node:crypto";
import { cp, mkdtemp, readFile, rm, writeFile } from "node:fs/promises";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { migrate } from "drizzle-orm/postgres-js/migrator";
import postgres from "postgres";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import type { FleetClient } from "../src/producer/client.js";
import { openDatabase } from "../src/shared/db/client.js";
import { MIGRATIONS_FOLDER, migrateDatabase } from "../src/shared/db/migrate.js";
import type { RunRow } from "../src/shared/db/schema.js";
import { EventWriter } from "../src/shared/event-writer.js";
import { eventStreamKey, seqKey } from "../src/shared/events.js";
import { RunQueues } from "../src/shared/queues.js";
import { BatchStore } from "../src/shared/store/batches.js";
import { FencedWrites } from "../src/shared/store/fenced-writes.js";
import { endingAppendsTogether } from "../src/shared/store/grouped-appends.js";
import { claimAlone, claimsTogether } from "../src/shared/store/grouped-claims.js";
import { createRun, type NewRun } from "../src/shared/store/run-queueing.js";
import { SessionQueries } from "../src/shared/store/session-queries.js";
import { endingAppendAlone } from "../src/shared/store/single-appends.js";
import { createFleetEnv, type FleetEnv, seqsOf, waitFor } from "./support/fleet-env.js";
import { CRASH_HISTORY } from "./support/histories.js";

const answering = (text: string) => ({
  model: { provider: "scripted" as const, steps: [{ text }] },
  tools: ["write_file"],
});

/** A run's id, from a row or the JSON (or its text) a statement returns. */
const idOf = (run: RunRow | { id: string } | string | null | undefined) =>
  typeof run === "string" ? (JSON.parse(run) as { id: string }).id : run?.id;

describe("a session's runs start in the order they were queued", () => {
  let fleet: FleetEnv;
  let client: FleetClient;
  let queries: SessionQueries;

  beforeAll(async () => {
    fleet = await createFleetEnv("runqueueorder");
    ({ client } = await fleet.startApi());
    queries = new SessionQueries(fleet.database);
  }, 90_000);
  afterAll(() => fleet?.close());

  /**
   * Queues a message's run of `id` whose transaction begins before `between` runs and takes
   * the session's row after it has committed: its tenant's advisory lock is held until then.
   */
  async function messageAround<T>(id: string, input: string, between: () => Promise<T>) {
    const { sql } = fleet.database;
    let release!: () => void;
    const held = new Promise<void>((resolve) => (release = resolve));
    let locked!: () => void;
    const isLocked = new Promise<void>((resolve) => (locked = resolve));
    const holding = sql.begin(async (tx) => {
      await tx`select pg_advisory_xact_lock(hashtextextended(${"fleet-active:default"}, 0))`;
      locked();
      await held;
    });
    await isLocked;
    const message = createRun(
      fleet.database,
      { sessionId: id, kind: "run", trigger: "api", input },
      { tenant: "default", maxActiveSessions: 1_000, unpark: true },
    );
    await waitFor(
      async () =>
        (
          await sql`select 1 from pg_stat_activity
                     where wait_event = 'advisory' and datname = current_database()`
        ).length > 0,
      20_000,
      "the message's transaction to wait on its tenant's lock",
    );
    let during: T;
    try {
      during = await between();
    } finally {
      release();
      await holding;
    }
    return { between: during, message: (await message).run };
  }

  const queue = (run: NewRun, options: Parameters<typeof createRun>[2] = {}) =>
    createRun(fleet.database, run, options).then((r) => r.run);

  /** Whether run `a`'s `created_at` (its transaction's start) is before run `b`'s. */
  async function createdBefore(a: string, b: string): Promise<boolean> {
    const [row] = await fleet.database.sql<{ before: boolean }[]>`
      select (select created_at from runs where id = ${a}) < (select created_at from runs where id = ${b}) as before`;
    return row!.before;
  }

  it("a resume accepted before a message's run was queued is the session's next run, though the message's transaction began first", async () => {
    const { id } = await client.createSession({ agent: answering("ok"), messages: CRASH_HISTORY });
    const { between: resume, message } = await messageAround(id, "next", () =>
      queue(
        { sessionId: id, kind: "resume", trigger: "api", resumeKind: "recover_tools" },
        { unpark: true, explicitResume: { lastSeq: CRASH_HISTORY.length } },
      ),
    );
    expect(await createdBefore(message.id, resume.id)).toBe(true);

    expect((await queries.nextQueuedRun(id))?.id).toBe(resume.id);
    // Listed in the order they run: the latest (what a session stream follows) is the message's.
    expect((await queries.listRuns(id)).map((r) => r.id)).toEqual([resume.id, message.id]);
    const [latest] = await queries.listRunsPage(id, undefined, { limit: 1 });
    expect(latest?.id).toBe(message.id);
    const older = await queries.listRunsPage(id, undefined, { limit: 1, before: latest!.cursor });
    expect(older.map((r) => r.id)).toEqual([resume.id]);
    const claimedAlone = await claimAlone(fleet.database, {
      sessionId: id,
      workerId: "w1",
      startFirst: true,
      tail: "awaiting_model",
    });
    expect(idOf(claimedAlone?.next)).toBe(resume.id);
    const [together] = await claimsTogether(fleet.database, [
      { sessionId: id, workerId: "w2", startFirst: true, tail: "awaiting_model" },
    ]);
    expect(together?.locked).toBe(true);
    expect(idOf(together?.locked ? together.out?.next : null)).toBe(resume.id);
    // Nothing was started by either claim: the resume needs the history.
    expect((await queries.listRuns(id)).map((r) => r.status)).toEqual(["queued", "queued"]);
  }, 60_000);

  it("after a run ends, the message queued first is next, though the other's transaction began first", async () => {
    const { sql } = fleet.database;
    const { id } = await client.createSession({ agent: answering("ok") });
    const first = await queue({ sessionId: id, kind: "run", trigger: "api", input: "first" });
    const claimed = await claimAlone(fleet.database, {
      sessionId: id,
      workerId: "w",
      startFirst: true,
      tail: "awaiting_model",
    });
    expect(claimed?.started).not.toBeNull();
    const epoch = Number(claimed!.lease_epoch);
    const { between: early, message: late } = await messageAround(id, "late", () =>
      queue({ sessionId: id, kind: "run", trigger: "api", input: "early" }),
    );
    expect(await createdBefore(late.id, early.id)).toBe(true);

    const ending = {
      sessionId: id,
      epoch,
      lastSeq: 1,
      tail: "awaiting_model",
      tokens: 0,
      bytes: 0,
      runId: first.id,
      rows: [],
      outcome: "completed",
      error: null,
      usage: null,
      park: null,
    };
    const runningAgain = () =>
      sql`update runs set status = 'running', ended_reason = null, ended_at = null where id = ${first.id}`;

    const alone = await endingAppendAlone(fleet.database, ending);
    expect(alone.fenceOk).toBe(true);
    expect(idOf(alone.next)).toBe(early.id);
    await runningAgain();
    const [together] = await endingAppendsTogether(fleet.database, [ending]);
    expect(together?.locked && together.out.fenceOk).toBe(true);
    expect(idOf(together?.locked ? together.out.next : null)).toBe(early.id);
    await runningAgain();
    const writes = new FencedWrites(fleet.database, { groupWrites: false });
    expect(idOf((await writes.endRun({ sessionId: id, epoch }, first.id, "completed")).next)).toBe(early.id);
    expect((await queries.listRuns(id)).map((r) => r.id)).toEqual([first.id, early.id, late.id]);
  }, 60_000);

  it("an accepted resume runs before a message whose transaction began first: it resumes, then the message is answered", async () => {
    // In a batch: what the batch's results say is the session's last run is checked too.
    const batch = await client.createBatch([{ agent: answering("ok"), messages: CRASH_HISTORY }]);
    const id = batch.sessions[0]!.id;
    // The resume through the API (no tenant cap: it does not wait on the held lock), accepted.
    const { between: resumed, message } = await messageAround(id, "next", () => client.resume(id));
    expect(resumed.kind).toBe("recover_tools");
    // The message's job, as the API queues it; then a worker takes the session.
    const queues = new RunQueues(fleet.redis, fleet.config.prefix);
    try {
      await queues.enqueue("run", { sessionId: id, runId: message.id });
    } finally {
      await queues.close();
    }
    const worker = await fleet.spawnWorker();
    try {
      await waitFor(
        async () => (await client.getSession(id)).runs.every((r) => r.status === "ended"),
        40_000,
        "both runs to end",
      );
    } finally {
      worker.child.kill("SIGTERM");
      await worker.exited;
    }
    const session = await client.getSession(id);
    const byId = new Map(session.runs.map((r) => [r.id, r]));
    expect(byId.get(resumed.runId)?.endedReason).toBe("completed");
    expect(byId.get(message.id)?.endedReason).toBe("completed");
    expect(new Date(byId.get(resumed.runId)!.startedAt!).getTime()).toBeLessThanOrEqual(
      new Date(byId.get(message.id)!.startedAt!).getTime(),
    );
    const messages = session.messages;
    expect(seqsOf(messages)).toEqual(messages.map((_, i) => i + 1));
    // The resume answered b and called the model; the message came after its answer.
    expect(messages.map((m) => m.role)).toEqual([
      "user",
      "assistant",
      "tool",
      "tool",
      "assistant",
      "user",
      "assistant",
    ]);
    expect(messages[5]).toMatchObject({ role: "user", content: "next" });

    // The latest run is the one that ran last: the message's, for the batch's results and for
    // the repair of a run's end a stream lacks (here the stream is dropped, as Redis may lose it).
    const { ended } = await new BatchStore(fleet.database).endedPage(batch.id, null, 10);
    expect(ended.map((e) => e.lastRun)).toEqual([message.id]);
    await waitFor(
      async () => (await fleet.redis.hget(seqKey(fleet.config.prefix, id), "done")) === message.id,
      10_000,
      "the message run's RUN_COMPLETED",
    );
    await fleet.redis.del(eventStreamKey(fleet.config.prefix, id), seqKey(fleet.config.prefix, id));
    const writer = new EventWriter(fleet.redis, fleet.config.prefix);
    expect(await writer.missingRunEnd(fleet.database, id, 0)).toBe(message.id);
  }, 90_000);
});

describe("migration 0021", () => {
  const ADMIN_URL = process.env.TEST_ADMIN_DATABASE_URL ?? "postgres://postgres@127.0.0.1:5432/postgres";

  it("numbers the runs not ended in the order they were taken, and runs queued after it come after them", async () => {
    const name = `fleet_t_m0021_${randomUUID().slice(0, 8)}`;
    const admin = postgres(ADMIN_URL, { max: 1, onnotice: () => {} });
    await admin.unsafe(`create database "${name}"`);
    const url = new URL(ADMIN_URL);
    url.pathname = `/${name}`;
    const database = openDatabase(url.toString(), { max: 2 });
    // The migrations before it: a copy of drizzle/ whose journal ends at 0020.
    const before = await mkdtemp(join(tmpdir(), "fleet-m0021-"));
    try {
      await cp(MIGRATIONS_FOLDER, before, { recursive: true });
      const journal = JSON.parse(await readFile(join(before, "meta/_journal.json"), "utf8")) as {
        entries: { idx: number }[];
      };
      journal.entries = journal.entries.filter((e) => e.idx <= 20);
      await writeFile(join(before, "meta/_journal.json"), JSON.stringify(journal));
      await migrate(database.db, { migrationsFolder: before });
      const { sql } = database;
      await sql`insert into sessions (id, agent) values ('s1', '{}'), ('s2', '{}')`;
      // Inserted out of their created_at order, ended and not.
      const runs = [
        { id: "c", session: "s1", status: "queued", at: "2026-01-01T00:00:03Z" },
        { id: "a", session: "s1", status: "ended", at: "2026-01-01T00:00:01Z" },
        { id: "d", session: "s2", status: "running", at: "2026-01-01T00:00:01.5Z" },
        { id: "b", session: "s1", status: "queued", at: "2026-01-01T00:00:02Z" },
        { id: "e", session: "s2", status: "ended", at: "2026-01-01T00:00:04Z" },
      ];
      for (const r of runs)
        await sql`insert into runs (id, session_id, kind, trigger, status, created_at)
                  values (${r.id}, ${r.session}, 'run', 'api', ${r.status}, ${r.at})`;
      await migrateDatabase(database);
      await sql`insert into runs (id, session_id, kind, trigger) values ('f', 's1', 'run', 'api')`;
      const numbered = await sql<{ id: string; queue_seq: string }[]>`
        select id, queue_seq::text from runs order by id`;
      expect(Object.fromEntries(numbered.map((r) => [r.id, Number(r.queue_seq)]))).toEqual({
        a: 0,
        b: 2,
        c: 3,
        d: 1,
        e: 0,
        f: 4,
      });
      // s1's queue as the claims read it: b, c, then f.
      expect(await new SessionQueries(database).nextQueuedRun("s1").then((r) => r?.id)).toBe("b");
      expect((await new SessionQueries(database).listRuns("s1")).map((r) => r.id)).toEqual([
        "a",
        "b",
        "c",
        "f",
      ]);
    } finally {
      await database.close();
      await rm(before, { recursive: true, force: true });
      await admin.unsafe(`drop database if exists "${name}" with (force)`);
      await admin.end();
    }
  }, 120_000);
});
