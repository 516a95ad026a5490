/**
 * A fresh fleet's first big batch: the sweeper's statements ran (and Postgres settled on a
 * generic plan for them) while `runs` and `sessions` were empty, then 10,000 sessions
 * arrived before any ANALYZE. A plan made for empty tables that reads all queued runs once
 * per row of another table reads the backlog squared: the cancelled-leftovers scan ran for
 * hours on a new user's first batch of 10,000, holding the sweeper's tick, so no batch end
 * was recorded, no webhook sent and no interrupted session resumed. Each wide-scan statement
 * must read a number of index entries and rows that grows with the backlog, not its square.
 * What is checked is what Postgres counted (`pg_stat_user_*`), not time.
 */
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { openDatabase } from "../src/shared/db/client.js";
import { BatchStore } from "../src/shared/store/batches.js";
import { SweepQueries } from "../src/sweeper/sweep-queries.js";
import { createFleetEnv, type FleetEnv } from "./support/fleet-env.js";
import { runsAndSessionsReads } from "./support/stat-reads.js";

/** Sessions of the batch, each with a queued run a minute old; the first CANCELLED are cancelled. */
const BACKLOG = 300;
const CANCELLED = 3;

describe("the sweeper's wide scans on plans made while the tables were empty", () => {
  let fleet: FleetEnv;
  let db: ReturnType<typeof openDatabase>;
  beforeAll(async () => {
    fleet = await createFleetEnv("plansfresh");
    // One connection: the plans it keeps are the ones measured, and the statistics it reports
    // are flushed before each reading.
    db = openDatabase(fleet.config.databaseUrl, { max: 1 });
    await db.sql`alter table runs set (autovacuum_enabled = false)`;
    await db.sql`alter table sessions set (autovacuum_enabled = false)`;
  });
  afterAll(async () => {
    await db?.close();
    await fleet?.close();
  });

  /** Index entries and table rows read in `runs` and `sessions` while `fn` runs. */
  const reads = (fn: () => Promise<unknown>) => runsAndSessionsReads(db, fn);

  it("each reads the backlog a few times at most, and the leftovers scan ends the cancelled sessions' runs", async () => {
    const sweeps = new SweepQueries(db);
    const batches = new BatchStore(db);
    const scans: [string, () => Promise<unknown>][] = [
      ["attention scan", () => sweeps.sessionsNeedingAttention(200)],
      ["orphaned runs", () => sweeps.queuedRunsOlderThan(5_000, 500)],
      ["cancelled leftovers", () => sweeps.endCancelledLeftovers(5_000, 200)],
      ["unsettled batches", () => batches.unsettled(500)],
      ["batch has ended", () => batches.hasEnded("b-first")],
      ["batches ended", () => batches.endedAmong(["b-first"])],
    ];
    // The fleet starts empty: the sweeper runs every scan every second. After five runs of a
    // prepared statement Postgres keeps a generic plan when it costs no more than the custom
    // ones, as on empty tables, and uses it until the tables are analyzed.
    for (let round = 0; round < 8; round++) for (const [, scan] of scans) await scan();

    // The first batch: BACKLOG sessions, each with its queued run, never analyzed.
    const sql = db.sql;
    await sql`insert into batches (id, tenant) values ('b-first', 'default')`;
    await sql`insert into sessions (id, agent, batch_id)
      select 's-' || lpad(g::text, 6, '0'), '{"model":{"provider":"scripted","steps":[{"text":"hi"}]}}'::jsonb, 'b-first'
        from generate_series(1, ${BACKLOG}) g`;
    await sql`insert into runs (id, session_id, kind, trigger, status, input, created_at)
      select 'r-' || lpad(g::text, 6, '0'), 's-' || lpad(g::text, 6, '0'), 'run', 'api', 'queued', 'Go.',
             now() - interval '1 minute' + g * interval '1 millisecond'
        from generate_series(1, ${BACKLOG}) g`;
    // A few of them cancelled with their runs left queued (the race the leftovers scan mends).
    await sql`update sessions set status = 'cancelled' where id <= ${`s-${String(CANCELLED).padStart(6, "0")}`}`;

    const results: Record<string, unknown> = {};
    const counts: { what: string; index: number; seq: number }[] = [];
    for (const [what, scan] of scans) {
      const counted = await reads(async () => {
        results[what] = await scan();
      });
      counts.push({ what, ...counted });
    }
    // A few reads per session at most; a plan made for empty tables read the queued runs
    // once per row of the page (the leftovers scan: 300 × 200 × 300 rows here, and on a
    // batch of 10,000 it did not end in 15 minutes), or the sessions once per queued run.
    expect(counts).toEqual(
      scans.map(([what]) => ({
        what,
        index: expect.toSatisfy((n: number) => n <= BACKLOG * 10),
        seq: expect.toSatisfy((n: number) => n <= BACKLOG * 10),
      })),
    );
    const orphans = results["orphaned runs"] as Awaited<ReturnType<SweepQueries["queuedRunsOlderThan"]>>;
    expect(orphans.runs.map((run) => run.id)).toEqual(
      Array.from(
        { length: BACKLOG - CANCELLED },
        (_, k) => `r-${String(CANCELLED + k + 1).padStart(6, "0")}`,
      ),
    );
    expect(orphans.next).toBeUndefined();
    const leftovers = results["cancelled leftovers"] as Awaited<
      ReturnType<SweepQueries["endCancelledLeftovers"]>
    >;
    expect(leftovers.ended.map((run) => run.id).sort()).toEqual(["r-000001", "r-000002", "r-000003"]);
    expect(leftovers.next?.id).toBe("r-000200");
    const [states] = await sql<{ ended: number; queued: number }[]>`
      select count(*) filter (where status = 'ended')::int as ended,
             count(*) filter (where status = 'queued')::int as queued from runs`;
    expect(states).toEqual({ ended: CANCELLED, queued: BACKLOG - CANCELLED });
  });
});
