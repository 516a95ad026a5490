/**
 * A batch Postgres has not analyzed yet, for `npm run bench:backlog` and
 * test/plans-under-backlog.test.ts: sessions with one ended run each, analyzed, then one
 * queued run each (autovacuum off for both tables, so the statistics stay as they were); and
 * a worker's three grouped statements on a group of them: claim, append, run end.
 */
import type { Database } from "../src/shared/db/client.js";
import { appendsTogether, endingAppendsTogether } from "../src/shared/store/grouped-appends.js";
import { claimsTogether } from "../src/shared/store/grouped-claims.js";
import type { NewMessageRow } from "../src/shared/store/rows.js";

/** Session n's id (runs: `r-n` queued, `old-n` ended). */
export const backlogSession = (n: number): string => `s-${String(n).padStart(8, "0")}`;

/** Seeds `sessions` sessions and their ended runs, analyzes, then queues a run for each. */
export async function seedBacklog(database: Database, sessions: number): Promise<void> {
  const sql = database.sql;
  await sql`alter table runs set (autovacuum_enabled = false)`;
  await sql`alter table sessions set (autovacuum_enabled = false)`;
  await sql`insert into sessions (id, agent)
    select 's-' || lpad(g::text, 8, '0'), '{"model":{"provider":"scripted","steps":[{"text":"hi"}]}}'::jsonb
      from generate_series(1, ${sessions}) g`;
  await sql`insert into runs (id, session_id, kind, trigger, status, input, ended_at, ended_reason)
    select 'old-' || g, 's-' || lpad(g::text, 8, '0'), 'run', 'api', 'ended', 'x', now(), 'completed'
      from generate_series(1, ${sessions}) g`;
  await sql`vacuum analyze sessions`;
  await sql`vacuum analyze runs`;
  // The batch arrives after the statistics were taken.
  await sql`insert into runs (id, session_id, kind, trigger, status, input)
    select 'r-' || g, 's-' || lpad(g::text, 8, '0'), 'run', 'api', 'queued', 'Go.'
      from generate_series(1, ${sessions}) g`;
}

const answer = (seq: number, content: string): NewMessageRow => ({
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

/** Wraps each statement (to time it, or to count what Postgres read). */
export type Around = <T>(what: "claim" | "append" | "end", statement: () => Promise<T>) => Promise<T>;

/** Claims sessions `numbers` together, appends a step to each, and ends each run; throws if one fails. */
export async function claimAppendEnd(database: Database, numbers: number[], around: Around): Promise<void> {
  const ids = numbers.map(backlogSession);
  const claimed = await around("claim", () =>
    claimsTogether(
      database,
      ids.map((sessionId) => ({ sessionId, workerId: "bench", startFirst: true, tail: "awaiting_model" })),
    ),
  );
  const fences = claimed.map((claim, k) => {
    if (!claim.locked || !claim.out) throw new Error(`the claim of ${ids[k]} failed`);
    return { sessionId: ids[k]!, epoch: Number(claim.out.lease_epoch), runId: `r-${numbers[k]}` };
  });
  const appended = await around("append", () =>
    appendsTogether(
      database,
      fences.map((f) => ({
        ...f,
        lastSeq: 1,
        tail: "tools_pending",
        tokens: 0,
        bytes: 3,
        rows: [answer(2, "…")],
      })),
    ),
  );
  if (!appended.every((a) => a.locked && a.out?.inserted.length === 1)) throw new Error("an append failed");
  const ended = await around("end", () =>
    endingAppendsTogether(
      database,
      fences.map((f) => ({
        ...f,
        lastSeq: 2,
        tail: "completed",
        tokens: 0,
        bytes: 4,
        rows: [answer(3, "done")],
        outcome: "completed",
        error: null,
        usage: null,
        park: null,
      })),
    ),
  );
  if (!ended.every((e) => e.locked && e.out?.fenceOk)) throw new Error("a run end failed");
}
