/**
 * `npm run bench:backlog`: a worker's grouped statements right after a big batch, before
 * Postgres has analyzed `runs` again. A scratch database gets --sessions sessions (default
 * 20,000), each with one ended run, is analyzed, and then gets the batch: one queued run per
 * session (autovacuum is off for both tables, so the statistics stay as they were). Then
 * --groups rounds (default 40) of --size sessions (default 16): a grouped claim, a grouped
 * append and a grouped run end (grouped-claims.ts, grouped-appends.ts), each timed. The same
 * again after `ANALYZE runs, sessions`, in the same run: the baseline, with statistics that
 * know the backlog. Printed: median and p90 per statement, and the ratio of the medians
 * (stale / fresh; 1 means the plans hold without the statistics).
 *
 *   npm run bench:backlog -- --sessions 20000 --groups 40 --size 16
 */
import { parseArgs } from "node:util";
import { Redis } from "ioredis";
import { type Database, openDatabase } from "../src/shared/db/client.js";
import { appendsTogether, endingAppendsTogether } from "../src/shared/store/grouped-appends.js";
import { claimsTogether } from "../src/shared/store/grouped-claims.js";
import type { NewMessageRow } from "../src/shared/store/rows.js";
import { Cleanup, fmt, percentile, REDIS_URL, scratchFleet, table, wholeNumber } from "./support.js";

const { values } = parseArgs({
  options: {
    sessions: { type: "string", default: "20000" },
    groups: { type: "string", default: "40" },
    size: { type: "string", default: "16" },
  },
});
const SESSIONS = wholeNumber("sessions", values.sessions, 1);
const GROUPS = wholeNumber("groups", values.groups, 1);
const SIZE = wholeNumber("size", values.size, 1);
if (2 * GROUPS * SIZE > SESSIONS) throw new Error("--sessions must be at least 2 × groups × size");

const row = (seq: number, content: string): NewMessageRow => ({
  seq,
  role: "assistant",
  content,
  tool_calls: null,
  tool_call_id: null,
  call_seq: null,
  name: null,
  success: null,
  stop_reason: "end_turn",
  usage: null,
  provider_state: null,
});

type Times = { claim: number[]; append: number[]; end: number[] };

/** Claims, appends to and ends the runs of sessions `first` … in groups; returns each statement's times. */
async function rounds(db: Database, first: number): Promise<Times> {
  const times: Times = { claim: [], append: [], end: [] };
  const timed = async <T>(into: number[], fn: () => Promise<T>): Promise<T> => {
    const started = performance.now();
    const out = await fn();
    into.push(performance.now() - started);
    return out;
  };
  for (let g = 0; g < GROUPS; g++) {
    const ids = Array.from({ length: SIZE }, (_, k) => first + g * SIZE + k);
    const name = (n: number) => `s-${String(n).padStart(8, "0")}`;
    const claimed = await timed(times.claim, () =>
      claimsTogether(
        db,
        ids.map((n) => ({ sessionId: name(n), workerId: "bench", startFirst: true, tail: "awaiting_model" })),
      ),
    );
    const fences = claimed.map((answer, k) => {
      if (!answer.locked || !answer.out) throw new Error(`claim of ${name(ids[k]!)} failed`);
      return { sessionId: name(ids[k]!), epoch: Number(answer.out.lease_epoch), runId: `r-${ids[k]}` };
    });
    await timed(times.append, () =>
      appendsTogether(
        db,
        fences.map((f) => ({ ...f, lastSeq: 1, tail: "tools_pending", tokens: 0, rows: [row(2, "…")] })),
      ),
    );
    const ended = await timed(times.end, () =>
      endingAppendsTogether(
        db,
        fences.map((f) => ({
          ...f,
          lastSeq: 2,
          tail: "completed",
          tokens: 0,
          rows: [row(3, "done")],
          outcome: "completed",
          error: null,
          usage: null,
          park: null,
        })),
      ),
    );
    if (!ended.every((answer) => answer.locked && answer.out?.fenceOk)) throw new Error("a run end failed");
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
    const sql = db.sql;
    await sql`alter table runs set (autovacuum_enabled = false)`;
    await sql`alter table sessions set (autovacuum_enabled = false)`;
    await sql`insert into sessions (id, agent)
      select 's-' || lpad(g::text, 8, '0'), '{"model":{"provider":"scripted","steps":[{"text":"hi"}]}}'::jsonb
        from generate_series(1, ${SESSIONS}) g`;
    await sql`insert into runs (id, session_id, kind, trigger, status, input, ended_at, ended_reason)
      select 'old-' || g, 's-' || lpad(g::text, 8, '0'), 'run', 'api', 'ended', 'x', now(), 'completed'
        from generate_series(1, ${SESSIONS}) g`;
    await sql`vacuum analyze sessions`;
    await sql`vacuum analyze runs`;
    await sql`insert into runs (id, session_id, kind, trigger, status, input)
      select 'r-' || g, 's-' || lpad(g::text, 8, '0'), 'run', 'api', 'queued', 'Go.'
        from generate_series(1, ${SESSIONS}) g`;
    console.log(
      `${SESSIONS.toLocaleString("en")} sessions, a queued run each, statistics taken before they were queued; ${GROUPS} groups of ${SIZE}`,
    );
    const stale = await rounds(db, 1);
    await sql`analyze runs`;
    await sql`analyze sessions`;
    const fresh = await rounds(db, 1 + GROUPS * SIZE);
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
      ]),
    );
  } finally {
    await cleanup.run();
  }
  console.log(`total run time: ${fmt((Date.now() - began) / 1000, 1)} s`);
}

await main();
