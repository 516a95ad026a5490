/**
 * Batch results and ended sessions, read a page at a time: `GET /v1/batches/:id/results` and the
 * `SESSION_ENDED` events of a batch's stream (BatchStore's `resultsPage` and `endedPage`). A
 * session's state is computed from its row and its unfinished runs, as batches.ts says.
 */
import type { BatchResult } from "../api-types.js";
import type { Database } from "../db/client.js";
import type { ListCursor } from "./session-queries.js";
import { type MarkedSums, moveMarks, sumsFromMark, totalsOfRow } from "./session-usage.js";

/** A timestamp as a batch's JSON writes it (ISO); null: undefined. */
export const iso = (value: string | Date | null): string | undefined =>
  value === null ? undefined : new Date(value).toISOString();

/** A session of a batch in a terminal state, as `SESSION_ENDED` names it. */
export type EndedSession = {
  id: string;
  customId: string | null;
  status: "completed" | "parked" | "cancelled";
  parkedReason?: string;
  /** The id of the session's latest run (null: none), its end's fingerprint (batch-stream-check.ts). */
  lastRun?: string | null;
};

/** The columns of a batch's session that both result reads select: what its result's status is made of. */
type SessionResultRow = {
  id: string;
  custom_id: string | null;
  status: string;
  tail_state: string;
  run_started: boolean;
  parked_reason: string | null;
  running: boolean | null;
};

/** A session's state as batch results and counts name it, from its row and its unfinished runs. */
function resultStatus(r: SessionResultRow): BatchResult["status"] {
  if (r.status === "cancelled" || r.status === "parked") return r.status;
  if (r.running === true) return "running";
  if (r.running === false) return "queued";
  return r.run_started && r.tail_state !== "completed" ? "running" : "completed";
}

/**
 * One page of results in session-id order after `after` (keyset paging: each page is an
 * index range scan, so streaming 100,000 results holds one page in memory at a time).
 * `maxBytes`: the page also stops before the result whose output would take it past this
 * many bytes (the first is always there), so 500 outputs of megabytes each are not read at
 * once; a shorter page is then not the last (read on until a page is empty).
 */
export async function readResultsPage(
  database: Database,
  id: string,
  after: string,
  limit: number,
  maxBytes = Number.MAX_SAFE_INTEGER,
): Promise<(BatchResult & { id: string })[]> {
  // JIT off: the page's cost grows with its sessions' histories (the usage after a mark is
  // estimated at a third of a session's messages, though a mark leaves few or none to read),
  // and past jit_above_cost Postgres compiled it with LLVM on every page — 0.6 to 1.4 s for
  // 50 ms of work, a page of 500 sessions of 5,000 messages (test/batch-results-jit.test.ts).
  const [, rows] = await database.sql.begin((tx) => [
    tx`set local jit = off`,
    tx<
      (SessionResultRow & {
        cancelled_at: string | null;
        updated_at: string;
        output: string | null;
        last_ended: string | null;
      } & MarkedSums)[]
    >`
      with p as (
        -- The page's sessions, sized by their output (the last assistant text) first: only
        -- those within maxBytes are read whole.
        select s.id, 256 + coalesce((select octet_length(m.content) from messages m
                 where m.session_id = s.id and m.role = 'assistant' order by m.seq desc limit 1), 0) as bytes
          from sessions s where s.batch_id = ${id} and s.id > ${after}
         order by s.id limit ${limit}
      ), z as (
        select p.id, p.bytes, sum(p.bytes) over (order by p.id rows between unbounded preceding and current row) as upto
          from p
      ), s as materialized (
        select s.id, s.custom_id, s.status, s.tail_state, s.run_started, s.parked_reason, s.cancelled_at,
               s.updated_at
          from z join sessions s on s.id = z.id
         where z.upto <= ${maxBytes}::bigint or z.upto = z.bytes
      ), r as (
        -- The page's runs in one read (one index scan for the page's ids), not two per session.
        select r.session_id, bool_or(r.status = 'running') filter (where r.status <> 'ended') as running,
               max(r.ended_at) as last_ended
          from runs r where r.session_id = any(array(select s.id from s))
         group by r.session_id
      )
      select s.*, r.running, r.last_ended,
             (select m.content from messages m where m.session_id = s.id and m.role = 'assistant'
               order by m.seq desc limit 1) as output,
             u.input_tokens, u.output_tokens, u.cache_read_tokens, u.cache_write_tokens, u.reasoning_tokens,
             u.cost_usd, u.unknown_steps, u.seq, u.steps
        from s
        left join r on r.session_id = s.id
        cross join lateral (${tx.unsafe(sumsFromMark("s.id"))}) u
       order by s.id`,
  ]);
  // A session's usage is its mark and the steps after it: the page moves the marks it read far past.
  await moveMarks(
    database,
    rows.map((r) => ({ ...r, session_id: r.id })),
  );
  return rows.map((r) => {
    const status = resultStatus(r);
    const terminal = status === "completed" || status === "parked" || status === "cancelled";
    return {
      id: r.id,
      customId: r.custom_id,
      sessionId: r.id,
      status,
      ...(status === "parked" && r.parked_reason !== null ? { parkedReason: r.parked_reason } : {}),
      // A completed session's only (README): a session cancelled while its history still ended
      // in an answer (a follow-up cancelled before it ran) showed that earlier answer as if it
      // answered the input that was cancelled.
      output: status === "completed" && r.tail_state === "completed" ? r.output : null,
      usage: totalsOfRow(r),
      endedAt: terminal
        ? (iso(status === "cancelled" ? r.cancelled_at : (r.last_ended ?? r.updated_at)) ?? null)
        : null,
    };
  });
}

/**
 * One page of the batch's sessions with those in a terminal state: what `SESSION_ENDED`
 * events need, without the output and usage a result reads. Either every session, in id
 * order after `after.id` (`since` absent), or only those whose row changed at or after
 * `since`, in (updated_at, id) order after `after` — an index range on
 * `sessions_batch_updated_idx`, so a pass costs what changed, not the batch's size.
 * `next`: where the next page starts (null: this page was the last).
 */
export async function readEndedPage(
  database: Database,
  id: string,
  after: ListCursor | null,
  limit: number,
  since?: Date,
): Promise<{ next: ListCursor | null; ended: EndedSession[] }> {
  const { sql } = database;
  const from =
    since === undefined
      ? sql`and s.id > ${after?.id ?? ""} order by s.id`
      : sql`and (s.updated_at, s.id) > (timestamptz 'epoch' + ${after?.micros ?? String(since.getTime() * 1000)}::bigint * interval '1 microsecond', ${after?.id ?? ""})
              order by s.updated_at, s.id`;
  const rows = await sql<(SessionResultRow & { micros: string; last_run: string | null })[]>`
      select s.id, s.custom_id, s.status, s.tail_state, s.run_started, s.parked_reason,
             (select r.id from runs r where r.session_id = s.id
               order by r.queue_seq desc, r.created_at desc, r.id desc limit 1) as last_run,
             (select bool_or(r.status = 'running') from runs r
               where r.session_id = s.id and (r.status <> 'ended') is true) as running,
             (extract(epoch from s.updated_at) * 1000000)::bigint::text as micros
        from sessions s
       where s.batch_id = ${id} ${from}
       limit ${limit}`;
  const ended: EndedSession[] = [];
  for (const r of rows) {
    const status = resultStatus(r);
    if (status !== "completed" && status !== "parked" && status !== "cancelled") continue;
    ended.push({
      id: r.id,
      customId: r.custom_id,
      status,
      ...(status === "parked" && r.parked_reason !== null ? { parkedReason: r.parked_reason } : {}),
      lastRun: r.last_run,
    });
  }
  const last = rows.at(-1);
  return { next: rows.length === limit && last ? { micros: last.micros, id: last.id } : null, ended };
}
