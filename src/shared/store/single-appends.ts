/**
 * The worker's appends for one session in a statement of its own: a mid-run append
 * (`appendAlone`) and a run's last append with its end (`endingAppendAlone`). grouped-appends.ts
 * has the grouped forms, which do for each session exactly what these do.
 */
import type { Database } from "../db/client.js";
import { endsCancelled, runCancelled, statusForRun } from "./cancel-reads.js";
import type {
  AppendOutcome,
  EndingAppend,
  EndingOutcome,
  Inserted,
  SessionAppend,
} from "./grouped-appends.js";
import { countBytes } from "./history-bytes.js";
import { json, type RawRun } from "./rows.js";

/** One session's append in a statement of its own (grouped-appends.ts has the grouped one). */
export async function appendAlone(database: Database, append: SessionAppend): Promise<AppendOutcome> {
  // The session update is the fence (epoch and last_seq must both match); when it
  // matches no row, the insert inserts nothing. It leaves `updated_at` (indexed for the
  // session list) alone: with no indexed column changed, Postgres can update the row in
  // place (HOT). Run starts and ends, which change what the list shows, set it.
  const inserted = await database.sql<(Inserted & { status: string; session_events: boolean })[]>`
    with s as (
      update sessions
         set last_seq = ${append.lastSeq + append.rows.length}, tail_state = ${append.tail},
             tokens_used = tokens_used + ${append.tokens}, last_active_at = now(),
             ${countBytes(database.sql, append.bytes, append.lastSeq + append.rows.length)}
       where id = ${append.sessionId} and lease_epoch = ${append.epoch} and last_seq = ${append.lastSeq}
      returning id, ${statusForRun(database, database.sql`${append.runId}::text`)}, session_events
    )
    insert into messages (session_id, seq, role, content, tool_calls, tool_call_id, call_seq, name, success, stop_reason, usage, provider_state, run_id)
    select s.id, m.seq, m.role, m.content, m.tool_calls, m.tool_call_id, m.call_seq, m.name, m.success, m.stop_reason, m.usage, m.provider_state, ${append.runId}
      from s cross join jsonb_to_recordset(${JSON.stringify(append.rows)}::jsonb) as m(
        seq int, role text, content text, tool_calls jsonb, tool_call_id text, call_seq int,
        name text, success boolean, stop_reason text, usage jsonb, provider_state jsonb)
    returning seq, created_at, (select status from s) as status, (select session_events from s) as session_events`;
  return {
    inserted,
    status: inserted[0]?.status ?? null,
    sessionEvents: inserted[0]?.session_events ?? null,
  };
}

/** One run's last append and end in a statement of its own (grouped-appends.ts has the grouped one). */
export async function endingAppendAlone(database: Database, append: EndingAppend): Promise<EndingOutcome> {
  const completed = append.outcome === "completed";
  const { sessionId, runId, park } = append;
  const runIdText = database.sql`${runId}::text`;
  const [result] = await database.sql<
    {
      fence_ok: boolean;
      cancelled: boolean;
      inserted: Inserted[];
      next: RawRun | null;
      session_events: boolean | null;
    }[]
  >`
    with s as (
      update sessions
         set last_seq = ${append.lastSeq + append.rows.length}, tail_state = ${append.tail},
             tokens_used = tokens_used + ${append.tokens}, last_active_at = now(), updated_at = now(),
             ${countBytes(database.sql, append.bytes, append.lastSeq + append.rows.length)},
             resume_attempts = case when ${completed} then 0 else resume_attempts end,
             next_resume_at = case when ${completed} then null else next_resume_at end,
             status = case when ${park !== null} and status = 'active' and not ${runCancelled(database, runIdText)}
                             and not exists (select 1 from runs q where q.session_id = ${sessionId}
                                               and q.status = (select 'queued'::text) and q.id <> ${runId})
                           then 'parked' else status end,
             parked_reason = case when ${park !== null} and status = 'active' and not ${runCancelled(database, runIdText)}
                             and not exists (select 1 from runs q where q.session_id = ${sessionId}
                                               and q.status = (select 'queued'::text) and q.id <> ${runId})
                           then ${park} else parked_reason end
       where id = ${sessionId} and lease_epoch = ${append.epoch} and last_seq = ${append.lastSeq}
      returning id, status, session_events, ${endsCancelled(database, runIdText)}
    ), ins as (
      insert into messages (session_id, seq, role, content, tool_calls, tool_call_id, call_seq, name, success, stop_reason, usage, provider_state, run_id)
      select s.id, m.seq, m.role, m.content, m.tool_calls, m.tool_call_id, m.call_seq, m.name, m.success, m.stop_reason, m.usage, m.provider_state, ${runId}
        from s cross join jsonb_to_recordset(${JSON.stringify(append.rows)}::jsonb) as m(
        seq int, role text, content text, tool_calls jsonb, tool_call_id text, call_seq int,
        name text, success boolean, stop_reason text, usage jsonb, provider_state jsonb)
      returning seq, created_at
    ), r as (
      update runs set status = 'ended', ended_at = now(),
                      ended_reason = case when (select cancelled from s) then 'cancelled' else ${append.outcome} end,
                      error = ${append.error},
                      usage = ${append.usage ? JSON.stringify(append.usage) : null}::jsonb
       where id = ${runId} and (status <> 'ended') is true and exists (select 1 from s)
      returning id
    )
    select exists (select 1 from s) as fence_ok, (select session_events from s) as session_events,
           coalesce((select cancelled from s), false) as cancelled,
           (select coalesce(json_agg(json_build_object('seq', seq, 'created_at', created_at)), '[]'::json) from ins)
             as inserted,
           (select row_to_json(q) from runs q where q.session_id = ${sessionId} and q.status = (select 'queued'::text)
              and q.id <> ${runId} and (select status from s) = 'active'
             order by q.queue_seq limit 1) as next`;
  return {
    fenceOk: result!.fence_ok,
    cancelled: result!.cancelled,
    inserted: json<Inserted[]>(result!.inserted),
    next: result!.next ? json<RawRun>(result!.next) : null,
    sessionEvents: result!.session_events,
  };
}
