/**
 * Whether a batch has ended (BatchStore.hasEnded, batch-busy.ts), asked by the sweeper on each
 * scan and by every reader of the batch's events every second, must read what may still move,
 * not the batch or its tenant's backlog: here a batch of 10,000 sessions at its end, beside
 * another of 10,000 queued for the same tenant, with statistics taken while the first one ran.
 * What is checked is what Postgres counted (`pg_stat_user_*`), not time. And two runs ending at
 * once, the batch's last two, end it once.
 */
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { openDatabase } from "../src/shared/db/client.js";
import { BatchStore } from "../src/shared/store/batches.js";
import { DataDeletion } from "../src/shared/store/data-deletion.js";
import { BatchEnds } from "../src/sweeper/batch-ends.js";
import { createFleetEnv, type FleetEnv } from "./support/fleet-env.js";
import { runsAndSessionsReads } from "./support/stat-reads.js";

const N = 10_000;
const id = (prefix: string, n: number) => `${prefix}-${String(n).padStart(6, "0")}`;

describe("whether a batch has ended", () => {
  let fleet: FleetEnv;
  let db: ReturnType<typeof openDatabase>;
  beforeAll(async () => {
    fleet = await createFleetEnv("hasended");
    db = openDatabase(fleet.config.databaseUrl, { max: 1 });
  });
  afterAll(async () => {
    await db?.close();
    await fleet?.close();
  });

  it("reads a few index entries at a batch's end, whatever else its tenant has queued", async () => {
    const { sql } = db;
    await sql`alter table runs set (autovacuum_enabled = false)`;
    await sql`alter table sessions set (autovacuum_enabled = false)`;
    await sql`insert into batches (id, tenant) values ('b-end', 'default'), ('b-next', 'default')`;
    // b-end mid-run: each session started, its run running; b-next queued behind it.
    await sql`insert into sessions (id, agent, batch_id, run_started, tail_state)
      select 'a-' || lpad(g::text, 6, '0'), '{}'::jsonb, 'b-end', true, 'awaiting_model' from generate_series(1, ${N}) g`;
    await sql`insert into runs (id, session_id, kind, trigger, status, input)
      select 'ra-' || g, 'a-' || lpad(g::text, 6, '0'), 'run', 'api', 'running', 'x' from generate_series(1, ${N}) g`;
    await sql`insert into sessions (id, agent, batch_id) select 'b-' || lpad(g::text, 6, '0'), '{}'::jsonb, 'b-next'
                from generate_series(1, ${N}) g`;
    await sql`insert into runs (id, session_id, kind, trigger, status, input)
      select 'rb-' || g, 'b-' || lpad(g::text, 6, '0'), 'run', 'api', 'queued', 'x' from generate_series(1, ${N}) g`;
    // Statistics of the batch running; then all but one of its sessions end (vacuumed, not analyzed).
    await sql`analyze sessions`;
    await sql`analyze runs`;
    await sql`update runs set status = 'ended', ended_at = now(), ended_reason = 'completed'
               where id like 'ra-%' and id <> 'ra-1'`;
    await sql`update sessions set tail_state = 'completed' where batch_id = 'b-end' and id <> ${id("a", 1)}`;
    await sql`vacuum sessions`;
    await sql`vacuum runs`;
    expect((await sql`select count(*)::int as n from runs where batch_id = 'b-end'`)[0]!.n).toBe(N);

    const batches = new BatchStore(db);
    const look = async (batch: string) => {
      let ended: boolean | undefined;
      const read = await runsAndSessionsReads(db, async () => {
        ended = await batches.hasEnded(batch);
      });
      return { ended, ...read };
    };
    const few = { index: expect.toSatisfy((n: number) => n <= 10), seq: 0 };
    // The sweeper's look at a page of batches at once (endedAmong): as few for each.
    const lookBoth = async () => {
      let ended: string[] = [];
      const read = await runsAndSessionsReads(db, async () => {
        ended = [...(await batches.endedAmong(["b-end", "b-next"]))];
      });
      return { ended, ...read };
    };
    const fewForTwo = { index: expect.toSatisfy((n: number) => n <= 20), seq: 0 };
    // Several looks each: the statement settles on its plan (a generic one after five).
    for (let k = 0; k < 7; k++) {
      expect({ k, ...(await look("b-end")) }).toEqual({ k, ended: false, ...few });
      expect({ k, ...(await look("b-next")) }).toEqual({ k, ended: false, ...few });
      expect({ k, ...(await lookBoth()) }).toEqual({ k, ended: [], ...fewForTwo });
    }
    // The last run ends: before, every unfinished run of the tenant was read (21,951 entries).
    await sql`update runs set status = 'ended', ended_at = now(), ended_reason = 'completed' where id = 'ra-1'`;
    await sql`update sessions set tail_state = 'completed' where id = ${id("a", 1)}`;
    for (let k = 0; k < 7; k++) {
      expect({ k, ...(await look("b-end")) }).toEqual({ k, ended: true, ...few });
      expect({ k, ...(await lookBoth()) }).toEqual({ k, ended: ["b-end"], ...fewForTwo });
    }
    // A session that had ended is sent a new message: its queued run keeps the batch running
    // (before: 5,992 entries read to find it among the tenant's).
    await sql`insert into runs (id, session_id, kind, trigger, status, input)
               values ('again', ${id("a", 5_000)}, 'run', 'api', 'queued', 'more')`;
    expect(await sql`select batch_id from runs where id = 'again'`).toEqual([{ batch_id: "b-end" }]);
    for (let k = 0; k < 7; k++) {
      expect({ k, ...(await look("b-end")) }).toEqual({ k, ended: false, ...few });
      expect({ k, ...(await lookBoth()) }).toEqual({ k, ended: [], ...fewForTwo });
    }
    // A cancelled session's run still running (its worker is aborting it) moves nothing.
    await sql`update runs set status = 'running' where id = 'again'`;
    await sql`update sessions set status = 'cancelled' where id = ${id("a", 5_000)}`;
    expect(await look("b-end")).toEqual({ ended: true, ...few });
  });

  it("two runs ending at once, the batch's last two, end it once", async () => {
    const { sql } = fleet.database;
    const s = (n: number) => `c-${n}`;
    // The first test's batches are out of the sweeper's way.
    await sql`update batches set ended_at = now()`;
    await sql`insert into batches (id, tenant) values ('b-two', 'default')`;
    await sql`insert into sessions (id, agent, batch_id, run_started, tail_state)
               values (${s(1)}, '{}'::jsonb, 'b-two', true, 'awaiting_model'),
                      (${s(2)}, '{}'::jsonb, 'b-two', true, 'awaiting_model'),
                      (${s(3)}, '{}'::jsonb, 'b-two', true, 'completed')`;
    await sql`insert into runs (id, session_id, kind, trigger, status, input)
               values ('rc-1', ${s(1)}, 'run', 'api', 'running', 'x'), ('rc-2', ${s(2)}, 'run', 'api', 'running', 'x')`;
    const batches = new BatchStore(fleet.database);
    const ends = new BatchEnds({
      store: batches,
      queue: {} as never, // no webhook: nothing is queued
      log: { info: () => {}, warn: () => {} },
    });
    // Each worker's run end: its run ended and its session's history completed, in one transaction.
    const endRun = (n: number, hold: Promise<void>) =>
      sql.begin(async (tx) => {
        await tx`update runs set status = 'ended', ended_at = now(), ended_reason = 'completed' where id = ${`rc-${n}`}`;
        await tx`update sessions set tail_state = 'completed', updated_at = now() where id = ${s(n)}`;
        await hold;
      });
    let release!: () => void;
    const hold = new Promise<void>((resolve) => {
      release = resolve;
    });
    const both = Promise.all([endRun(1, hold), endRun(2, hold)]);
    // Both ends written, neither committed: not ended, whoever looks.
    await waitForLocks(sql, 2);
    expect(await batches.hasEnded("b-two")).toBe(false);
    expect(await ends.scan()).toBe(0);
    // They commit at once while the sweeper scans: the batch ends once, never before both.
    release();
    const endedNow: number[] = [];
    let done = false;
    const scans = (async () => {
      while (!done) endedNow.push(await ends.scan());
    })();
    await both;
    done = true;
    await scans;
    endedNow.push(await ends.scan(), await ends.scan());
    expect(endedNow.reduce((a, b) => a + b, 0)).toBe(1);
    expect(await batches.hasEnded("b-two")).toBe(true);
    const [row] = await sql<
      { ended: boolean }[]
    >`select ended_at is not null as ended from batches where id = 'b-two'`;
    expect(row).toEqual({ ended: true });
  });

  it("retention does not expire a batch one of whose ended sessions was sent a new message", async () => {
    const { sql } = fleet.database;
    await sql`insert into batches (id, tenant, ended_at) values ('b-old', 'default', now() - interval '2 days')`;
    await sql`insert into sessions (id, agent, batch_id, run_started, tail_state)
               values ('o-1', '{}'::jsonb, 'b-old', true, 'completed'), ('o-2', '{}'::jsonb, 'b-old', true, 'completed')`;
    await sql`insert into runs (id, session_id, kind, trigger, status, input)
               values ('ro-1', 'o-1', 'run', 'api', 'queued', 'one more')`;
    const deletion = new DataDeletion(fleet.database);
    // Before: only the batch's sessions mid-run or never started were looked at, and it went.
    expect(await deletion.expireBatches(86_400_000, 10)).toEqual([]);
    await sql`update runs set status = 'ended', ended_at = now(), ended_reason = 'completed' where id = 'ro-1'`;
    expect(await deletion.expireBatches(86_400_000, 10)).toEqual(["b-old"]);
  });
});

/** Until `n` transactions of this database hold row locks on runs (their updates are written). */
async function waitForLocks(sql: FleetEnv["database"]["sql"], n: number): Promise<void> {
  for (;;) {
    const [row] = await sql<{ n: number }[]>`
      select count(distinct l.pid)::int as n from pg_locks l join pg_database d on d.oid = l.database
       where d.datname = current_database() and l.relation = 'runs'::regclass and l.mode = 'RowExclusiveLock'
         and l.pid <> pg_backend_pid()`;
    if (row!.n >= n) return;
    await new Promise((resolve) => setTimeout(resolve, 10));
  }
}
