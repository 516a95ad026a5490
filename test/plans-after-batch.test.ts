/**
 * The sweeper's ticks after a fresh fleet's first batch: the statements were planned (and
 * Postgres kept generic plans for them) while `runs` and `sessions` were empty, then a batch
 * of sessions ran to its end, never analyzed (autovacuum off). Each tick must read rows in
 * proportion to what is queued, not the whole batch: the cancelled-leftovers scan read every
 * row of `runs` once per second (522 sequential scans, 5.67 million rows read for 22,000 rows
 * after a batch of 10,000). What is checked is what Postgres counted (`pg_stat_user_*`), not
 * time.
 */
import { afterAll, beforeAll, describe, expect, it, onTestFinished } from "vitest";
import { databaseName, openDatabase } from "../src/shared/db/client.js";
import { SweepQueries } from "../src/sweeper/sweep-queries.js";
import { createFleetEnv, type FleetEnv } from "./support/fleet-env.js";
import { untilDeadToAll } from "./support/xid-horizon.js";

/** Sessions of the batch, each with one ended run. */
const BATCH = 2_000;
/** Runs queued a minute ago and left: on cancelled sessions, and on active ones (orphans). */
const QUEUED = 4;

type Reads = { runs: number; sessions: number };

// `auto`: Postgres's default, a prepared statement's generic plan kept after five runs when it
// costs no more than the custom ones; `force_generic_plan`: always the generic plan.
describe.each(["auto", "force_generic_plan"])(
  "the sweeper's scans after a batch, plan_cache_mode %s, on plans made while the tables were empty",
  (mode) => {
    let fleet: FleetEnv;
    let db: ReturnType<typeof openDatabase>;
    beforeAll(async () => {
      fleet = await createFleetEnv("plansafter");
      await fleet.database.sql.unsafe(
        `alter database "${databaseName(fleet.config.databaseUrl)}" set plan_cache_mode = ${mode}`,
      );
      // One connection (opened after the setting): the plans it keeps are the ones measured.
      db = openDatabase(fleet.config.databaseUrl, { max: 1 });
      const [setting] = await db.sql<{ plan_cache_mode: string }[]>`show plan_cache_mode`;
      expect(setting?.plan_cache_mode).toBe(mode);
      await db.sql`alter table runs set (autovacuum_enabled = false)`;
      await db.sql`alter table sessions set (autovacuum_enabled = false)`;
    });
    afterAll(async () => {
      await db?.close();
      await fleet?.close();
    });

    /** Rows and index entries read in `runs` and in `sessions` while `fn` runs. */
    async function reads(fn: () => Promise<unknown>): Promise<Reads> {
      const sql = db.sql;
      const read = async (): Promise<Reads> => {
        await sql`select pg_stat_force_next_flush()`;
        await sql`select 1`; // its end flushes what the statements before it counted
        await sql`select pg_stat_clear_snapshot()`;
        const rows = await sql<{ relname: string; n: string }[]>`
        select t.relname,
               coalesce(t.seq_tup_read, 0)
               + coalesce((select sum(i.idx_tup_read) from pg_stat_user_indexes i where i.relid = t.relid), 0) as n
          from pg_stat_user_tables t where t.relname in ('runs', 'sessions')`;
        const of = (name: string) => Number(rows.find((row) => row.relname === name)?.n ?? 0);
        return { runs: of("runs"), sessions: of("sessions") };
      };
      const before = await read();
      await fn();
      const after = await read();
      return { runs: after.runs - before.runs, sessions: after.sessions - before.sessions };
    }

    it("each reads what is queued, not the batch, and the leftovers scan still ends the cancelled sessions' runs", async () => {
      const sweeps = new SweepQueries(db);
      const scans: [string, () => Promise<unknown>][] = [
        ["orphaned runs", () => sweeps.queuedRunsOlderThan(5_000, 500)],
        ["cancelled leftovers", () => sweeps.endCancelledLeftovers(5_000, 200)],
      ];
      // A fresh fleet: the sweeper runs every scan every second on the empty tables; after
      // five runs of a prepared statement Postgres keeps the generic plan made for them.
      for (let round = 0; round < 8; round++) {
        for (const [, scan] of scans) await scan();
        await sweeps.runningRuns(); // measured in the next test, on the plan made here
      }

      // The first batch, run to its end: BATCH completed sessions, each with its ended run.
      const sql = db.sql;
      await sql`insert into sessions (id, agent, run_started)
      select 's-' || lpad(g::text, 6, '0'), '{"model":{"provider":"scripted","steps":[{"text":"hi"}]}}'::jsonb, true
        from generate_series(1, ${BATCH}) g`;
      await sql`insert into runs (id, session_id, kind, trigger, status, input, created_at, ended_at, ended_reason)
      select 'r-' || lpad(g::text, 6, '0'), 's-' || lpad(g::text, 6, '0'), 'run', 'api', 'ended', 'Go.',
             now() - interval '2 minutes' + g * interval '1 millisecond', now() - interval '90 seconds', 'completed'
        from generate_series(1, ${BATCH}) g`;

      // An idle tick: nothing queued.
      const idle: Record<string, Reads> = {};
      for (const [what, scan] of scans) idle[what] = await reads(scan);
      expect(idle).toEqual({
        "orphaned runs": { runs: expect.toSatisfy((n: number) => n <= 10), sessions: 0 },
        "cancelled leftovers": { runs: expect.toSatisfy((n: number) => n <= 10), sessions: 0 },
      });

      // A few runs queued a minute ago and left: half on cancelled sessions (leftovers of a
      // cancel race), half on active ones (their job lost).
      await sql`insert into sessions (id, agent, status)
      select 'q-' || g, '{"model":{"provider":"scripted","steps":[{"text":"hi"}]}}'::jsonb,
             case when g <= ${QUEUED / 2} then 'cancelled' else 'active' end
        from generate_series(1, ${QUEUED}) g`;
      await sql`insert into runs (id, session_id, kind, trigger, status, input, created_at)
      select 'rq-' || g, 'q-' || g, 'run', 'api', 'queued', 'Go.', now() - interval '1 minute' + g * interval '1 millisecond'
        from generate_series(1, ${QUEUED}) g`;
      const results: Record<string, unknown> = {};
      const busy: Record<string, Reads> = {};
      for (const [what, scan] of scans)
        busy[what] = await reads(async () => {
          results[what] = await scan();
        });
      // A few reads per queued run: an index entry and a row for the page, a session each,
      // the leftovers' runs again to end them.
      const few = expect.toSatisfy((n: number) => n <= QUEUED * 5);
      expect(busy).toEqual({
        "orphaned runs": { runs: few, sessions: few },
        "cancelled leftovers": { runs: few, sessions: few },
      });
      const orphans = results["orphaned runs"] as Awaited<ReturnType<SweepQueries["queuedRunsOlderThan"]>>;
      expect(orphans.runs.map((run) => run.id)).toEqual(["rq-3", "rq-4"]);
      const leftovers = results["cancelled leftovers"] as Awaited<
        ReturnType<SweepQueries["endCancelledLeftovers"]>
      >;
      expect(leftovers.ended.map((run) => run.id).sort()).toEqual(["rq-1", "rq-2"]);
      const [states] = await sql<{ ended: number; queued: number }[]>`
      select count(*) filter (where status = 'ended')::int as ended,
             count(*) filter (where status = 'queued')::int as queued from runs`;
      expect(states).toEqual({ ended: BATCH + QUEUED / 2, queued: QUEUED / 2 });
    });

    /** Index entries and heap blocks of `runs` read while `fn` runs. */
    async function runsTouched(
      fn: () => Promise<unknown>,
      other: ReturnType<typeof openDatabase>,
    ): Promise<{ entries: number; blocks: number }> {
      const sql = db.sql;
      const read = async () => {
        for (const each of [other.sql, sql]) {
          await each`select pg_stat_force_next_flush()`;
          await each`select 1`;
        }
        await sql`select pg_stat_clear_snapshot()`;
        const [row] = await sql<{ entries: string; blocks: string }[]>`
          select (select coalesce(sum(idx_tup_read), 0) from pg_stat_user_indexes where relname = 'runs') as entries,
                 (select coalesce(heap_blks_hit, 0) + coalesce(heap_blks_read, 0)
                    from pg_statio_user_tables where relname = 'runs') as blocks`;
        return { entries: Number(row!.entries), blocks: Number(row!.blocks) };
      };
      const before = await read();
      await fn();
      const after = await read();
      return { entries: after.entries - before.entries, blocks: after.blocks - before.blocks };
    }

    it("after runs went queued → running → ended, never vacuumed, a tick does not read their old versions again", async () => {
      const sweeps = new SweepQueries(db);
      const sql = db.sql;
      // Another batch, run to its end: each run's queued and running versions stay in
      // runs_unfinished_idx (a change of status is never a HOT update) until a vacuum, which
      // never comes with autovacuum off. Older than the two runs still queued (rq-3, rq-4).
      await sql`insert into sessions (id, agent, run_started)
        select 'd-' || g, '{"model":{"provider":"scripted","steps":[{"text":"hi"}]}}'::jsonb, true
          from generate_series(1, ${BATCH}) g`;
      await sql`insert into runs (id, session_id, kind, trigger, status, input, created_at)
        select 'rd-' || g, 'd-' || g, 'run', 'api', 'queued', 'Go.', now() - interval '3 minutes' + g * interval '1 millisecond'
          from generate_series(1, ${BATCH}) g`;
      await sql`update runs set status = 'running', started_at = now() where id like 'rd-%'`;
      const [ended] = await sql<{ xid: string }[]>`
        with ended as (
          update runs set status = 'ended', ended_at = now(), ended_reason = 'completed' where id like 'rd-%'
        )
        select pg_current_xact_id()::text as xid`;
      // A scan marks the old versions' entries only once they are dead to every snapshot:
      // a transaction open then anywhere in the cluster (a test file alongside) would leave
      // each scan below reading them all again (test/support/xid-horizon.ts).
      await untilDeadToAll(fleet.database, ended!.xid);
      const late = openDatabase(fleet.config.databaseUrl, { max: 1 });
      onTestFinished(() => late.close());
      // The sweeper runs these every tick (running runs every 200 ms): the first may read the
      // old versions once; the ones after it must not, as a bitmap scan did at every tick
      // (its index entries and every block of the table: dead entries are only skipped once
      // a plain index scan has marked them). The sweeper's pool opens connections as it needs
      // them: one opened after the batch plans the statement for the tables as they are then
      // (a bitmap scan), measured first, as anything else reading them could mark them.
      const scans: [string, () => Promise<unknown>][] = [
        ["running runs, a later connection", () => new SweepQueries(late).runningRuns()],
        ["running runs", () => sweeps.runningRuns()],
        ["orphaned runs", () => sweeps.queuedRunsOlderThan(5_000, 500)],
        ["cancelled leftovers", () => sweeps.endCancelledLeftovers(5_000, 200)],
      ];
      const later: Record<string, { entries: number; blocks: number }> = {};
      for (const [what, scan] of scans) {
        await scan();
        await scan();
        later[what] = await runsTouched(scan, late);
      }
      const few = {
        entries: expect.toSatisfy((n: number) => n <= 20),
        blocks: expect.toSatisfy((n: number) => n <= 5),
      };
      expect(later).toEqual({
        "running runs, a later connection": few,
        "running runs": few,
        "orphaned runs": few,
        "cancelled leftovers": few,
      });
      const orphans = await sweeps.queuedRunsOlderThan(5_000, 500);
      expect(orphans.runs.map((run) => run.id)).toEqual(["rq-3", "rq-4"]);
      expect(await sweeps.runningRuns()).toEqual([]);
    });
  },
);
