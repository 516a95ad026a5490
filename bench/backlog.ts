/**
 * `npm run bench:backlog`: a worker's grouped statements right after a big batch, before
 * Postgres has analyzed `runs` again. A scratch database gets --sessions sessions (default
 * 20,000), each with one ended run, is analyzed, and then gets the batch: one queued run per
 * session (autovacuum is off for both tables, so the statistics stay as they were). Then
 * --groups rounds (default 40) of --size sessions (default 16): a grouped claim, a grouped
 * append and a grouped run end (grouped-claims.ts, grouped-appends.ts), each timed. The same
 * again after `ANALYZE runs, sessions`, in the same run: the baseline, with statistics that
 * know the backlog. Printed: median and p90 per statement, and the ratio of the medians
 * (stale / fresh; 1 means the plans hold without the statistics). Likewise, with the last
 * 2,000 sessions mid-run (started, tail open, their run queued) and 100 of them in a batch:
 * the sweeper's attention scan (200) and a page of 100 batch results, --lookups times each.
 * Last, with every session in one batch: what a reader of the batch's events read each
 * second before (every result, in pages of 500), a full events pass (batch-event-sync.ts:
 * ids and states only) and an incremental one when nothing changed.
 *
 *   npm run bench:backlog -- --sessions 20000 --groups 40 --size 16
 */
import { Redis } from "ioredis";
import { type Database, openDatabase } from "../src/shared/db/client.js";
import { BatchStore } from "../src/shared/store/batches.js";
import { SweepQueries } from "../src/sweeper/sweep-queries.js";
import { backlogSession, claimAppendEnd, seedBacklog } from "./backlog-fixture.js";
import {
  benchOptions,
  Cleanup,
  fmt,
  percentile,
  REDIS_URL,
  scratchFleet,
  table,
  wholeNumber,
} from "./support.js";

const values = benchOptions({
  sessions: { type: "string", default: "20000" },
  groups: { type: "string", default: "40" },
  size: { type: "string", default: "16" },
  lookups: { type: "string", default: "20" },
});
const SESSIONS = wholeNumber("sessions", values.sessions, 1);
const GROUPS = wholeNumber("groups", values.groups, 1);
const SIZE = wholeNumber("size", values.size, 1);
const LOOKUPS = wholeNumber("lookups", values.lookups, 1);
const MID_RUN = 2_000;
if (2 * GROUPS * SIZE + MID_RUN > SESSIONS)
  throw new Error(`--sessions must be at least 2 × groups × size + ${MID_RUN}`);

type Times = { claim: number[]; append: number[]; end: number[] };

type LookupTimes = { attention: number[]; results: number[] };

/** The sweeper's attention scan and a batch results page, each timed LOOKUPS times. */
async function lookups(sweeps: SweepQueries, batches: BatchStore): Promise<LookupTimes> {
  const times: LookupTimes = { attention: [], results: [] };
  for (let n = 0; n < LOOKUPS; n++) {
    let started = performance.now();
    if ((await sweeps.sessionsNeedingAttention(200)).length !== 0)
      throw new Error("no session needs attention");
    times.attention.push(performance.now() - started);
    started = performance.now();
    if ((await batches.resultsPage("b-backlog", "", 100)).length !== 100)
      throw new Error("a results page of 100");
    times.results.push(performance.now() - started);
  }
  return times;
}

/** Claims, appends to and ends the runs of sessions `first` … in groups; returns each statement's times. */
async function rounds(db: Database, first: number): Promise<Times> {
  const times: Times = { claim: [], append: [], end: [] };
  for (let g = 0; g < GROUPS; g++) {
    const numbers = Array.from({ length: SIZE }, (_, k) => first + g * SIZE + k);
    await claimAppendEnd(db, numbers, async (what, statement) => {
      const started = performance.now();
      const out = await statement();
      times[what].push(performance.now() - started);
      return out;
    });
  }
  return times;
}

/** A batch events reader's passes over batch `id`, timed: the old one, a full one, an incremental one. */
async function eventPasses(
  batches: BatchStore,
  id: string,
): Promise<{ results: number[]; full: number[]; changed: number[] }> {
  const times = { results: [] as number[], full: [] as number[], changed: [] as number[] };
  for (let n = 0; n < 5; n++) {
    let started = performance.now();
    for (let after = "", size = 500; size === 500; ) {
      const page = await batches.resultsPage(id, after, 500);
      size = page.length;
      after = page.at(-1)?.id ?? after;
    }
    times.results.push(performance.now() - started);
    started = performance.now();
    for (let after: Awaited<ReturnType<BatchStore["endedPage"]>>["next"] = null; ; ) {
      after = (await batches.endedPage(id, after, 1_000)).next;
      if (after === null) break;
    }
    times.full.push(performance.now() - started);
    started = performance.now();
    const since = new Date((await batches.clock()).getTime() - 5_000);
    if ((await batches.endedPage(id, null, 1_000, since)).next !== null) throw new Error("nothing changed");
    times.changed.push(performance.now() - started);
  }
  return times;
}

async function main(): Promise<void> {
  const began = Date.now();
  const cleanup = new Cleanup();
  const redis = new Redis(REDIS_URL, { maxRetriesPerRequest: 1 });
  cleanup.add("close Redis", () => redis.quit());
  try {
    const { databaseUrl } = await scratchFleet(cleanup, redis, "backlog", 1);
    // One connection, as a worker's statements of one turn use one.
    const db = openDatabase(databaseUrl, { max: 1 });
    cleanup.add("close the database", () => db.close());
    await seedBacklog(db, SESSIONS);
    const sql = db.sql;
    // The last MID_RUN sessions mid-run as the statistics never saw them, 100 in a batch.
    const [firstMid, lastMid] = [backlogSession(SESSIONS - MID_RUN + 1), backlogSession(SESSIONS)];
    await sql`update sessions set run_started = true, tail_state = 'awaiting_model' where id between ${firstMid} and ${lastMid}`;
    await sql`insert into batches (id, tenant) values ('b-backlog', 'default')`;
    await sql`update sessions set batch_id = 'b-backlog' where id between ${firstMid} and ${backlogSession(SESSIONS - MID_RUN + 100)}`;
    const [sweeps, batches] = [new SweepQueries(db), new BatchStore(db)];
    console.log(
      `${SESSIONS.toLocaleString("en")} sessions, a queued run each, statistics taken before they were queued; ${GROUPS} groups of ${SIZE}`,
    );
    const stale = await rounds(db, 1);
    const staleLookups = await lookups(sweeps, batches);
    await sql`analyze runs`;
    await sql`analyze sessions`;
    const fresh = await rounds(db, 1 + GROUPS * SIZE);
    const freshLookups = await lookups(sweeps, batches);
    await sql`insert into batches (id, tenant) values ('b-all', 'default')`;
    // Sessions that ended a while ago: an incremental pass finds nothing changed since.
    await sql`update sessions set batch_id = 'b-all', updated_at = now() - interval '1 hour' where batch_id is null`;
    await sql`analyze sessions`;
    const [counted] = await sql<
      { n: number }[]
    >`select count(*)::int as n from sessions where batch_id = 'b-all'`;
    const inBatch = counted!.n;
    const passes = await eventPasses(batches, "b-all");
    const ms = (values: number[], p: number) => `${fmt(percentile(values, p), 2)} ms`;
    console.log();
    console.log(
      table([
        [`statement (${SIZE} sessions)`, "stale: p50", "p90", "analyzed: p50", "p90", "stale / analyzed"],
        ...(["claim", "append", "end"] as const).map((what) => [
          `grouped ${what === "end" ? "run end" : what}`,
          ms(stale[what], 50),
          ms(stale[what], 90),
          ms(fresh[what], 50),
          ms(fresh[what], 90),
          fmt(percentile(stale[what], 50) / percentile(fresh[what], 50), 2),
        ]),
        ...(["attention", "results"] as const).map((what) => [
          what === "attention"
            ? `attention scan (${MID_RUN.toLocaleString("en")} mid-run)`
            : "batch results page (100)",
          ms(staleLookups[what], 50),
          ms(staleLookups[what], 90),
          ms(freshLookups[what], 50),
          ms(freshLookups[what], 90),
          fmt(percentile(staleLookups[what], 50) / percentile(freshLookups[what], 50), 2),
        ]),
      ]),
    );
    console.log();
    console.log(
      table([
        [
          `batch events, one reader's pass over ${inBatch.toLocaleString("en")} sessions`,
          "p50",
          "max",
          "/ before",
        ],
        ...(
          [
            ["before: every result, pages of 500", passes.results],
            ["now, full pass (every 30 s): ids and states", passes.full],
            ["now, between them: only what changed (nothing)", passes.changed],
          ] as const
        ).map(([what, times]) => [
          what,
          `${fmt(percentile([...times], 50), 1)} ms`,
          `${fmt(Math.max(...times), 1)} ms`,
          fmt(percentile([...times], 50) / percentile(passes.results, 50), 4),
        ]),
      ]),
    );
  } finally {
    await cleanup.run();
  }
  console.log(`total run time: ${fmt((Date.now() - began) / 1000, 1)} s`);
}

await main();
