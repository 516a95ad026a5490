/**
 * Starting and ending a run, each in one statement fenced by the lease epoch (FencedWrites'
 * `startRun` and `endRun`): a worker that lost its lease changes nothing and learns it from a
 * FencedError.
 */
import type { Database } from "../db/client.js";
import type { RunRow } from "../db/schema.js";
import { FencedError } from "../errors.js";
import type { Message, StoredMessage, Usage } from "../messages.js";
import type { TailState } from "../tail-state.js";
import { endsCancelled } from "./cancel-reads.js";
import { type Fence, type HistoryCursor, parkedReason, stored, stripNul } from "./fenced-rows.js";
import type { Inserted } from "./grouped-appends.js";
import { countBytes, historyBytes } from "./history-bytes.js";
import { json, type RawRun, runFromRaw, toNewRows } from "./rows.js";

/**
 * Starts a queued run in one statement: marks it running and appends what must come
 * first (closed tool calls and the user message, or what the resume kind requires) —
 * both or neither. Returns null when the run was not queued any more.
 */
export async function startRun(
  database: Database,
  fence: Fence,
  cursor: HistoryCursor,
  run: { id: string; workerId: string; resumeKind: string | null },
  messages: readonly Message[],
  tail: TailState,
): Promise<StoredMessage[] | null> {
  const rows = toNewRows(messages, cursor.lastSeq, cursor.lastStepSeq);
  // The session row is locked before the run's (an uncorrelated `exists` is evaluated before
  // the update scans), the order a cancel uses (batch-cancel.ts): the run's row first, a cancel
  // holding the session and dropping queued runs deadlocked with this start, and Postgres
  // aborted one of them — the cancel answered 500, or the start failed the worker's job.
  const [result] = await database.sql<{ fence_ok: boolean; started: number; inserted: Inserted[] }[]>`
      with cur as (
        select id from sessions where id = ${fence.sessionId} and lease_epoch = ${fence.epoch}
           and last_seq = ${cursor.lastSeq} for no key update
      ), r as (
        update runs set status = 'running', started_at = now(), worker_id = ${run.workerId},
                        resume_kind = ${run.resumeKind}
         where id = ${run.id} and (status = 'queued') is true and exists (select 1 from cur)
        returning id
      ), s as (
        update sessions
           set last_seq = ${cursor.lastSeq + rows.length}, tail_state = ${tail}, run_started = true,
               last_active_at = now(), updated_at = now(),
               ${countBytes(database.sql, historyBytes(messages), cursor.lastSeq + rows.length)}
         where id = ${fence.sessionId} and lease_epoch = ${fence.epoch} and last_seq = ${cursor.lastSeq}
           and exists (select 1 from r)
        returning id
      ), ins as (
        insert into messages (session_id, seq, role, content, tool_calls, tool_call_id, call_seq, name, success, stop_reason, usage, provider_state, run_id)
        select s.id, m.seq, m.role, m.content, m.tool_calls, m.tool_call_id, m.call_seq, m.name, m.success, m.stop_reason, m.usage, m.provider_state, ${run.id}
          from s cross join jsonb_to_recordset(${JSON.stringify(rows)}::jsonb) as m(
          seq int, role text, content text, tool_calls jsonb, tool_call_id text, call_seq int,
          name text, success boolean, stop_reason text, usage jsonb, provider_state jsonb)
        returning seq, created_at
      )
      select exists (select 1 from sessions where id = ${fence.sessionId} and lease_epoch = ${fence.epoch}
                       and last_seq = ${cursor.lastSeq}) as fence_ok,
             (select count(*)::int from r) as started,
             (select coalesce(json_agg(json_build_object('seq', seq, 'created_at', created_at)), '[]'::json) from ins)
               as inserted`;
  if (!result!.fence_ok) throw new FencedError(fence.sessionId, fence.epoch);
  if (result!.started === 0) return null;
  return stored(messages, json<Inserted[]>(result!.inserted));
}

/** What `endRun` records besides the outcome. */
export type RunEndDetail = {
  error?: string | null;
  usage?: Usage | null;
  /** Park the session in the same statement (a limit was reached), unless more runs wait. */
  park?: { reason: string; detail?: string };
};

/**
 * What `endRun` answers: the session's next queued run, and whether the run ended `cancelled`
 * whatever outcome its worker sent (a cancel committed while it was running: contracts §9).
 */
export type RunEnd = { next: RunRow | null; cancelled: boolean };

/**
 * Records how a run ended and returns the session's next queued run, in one statement.
 * Fenced: a worker that lost the lease cannot rewrite a run. A completed run also resets
 * the session's count of automatic resume attempts.
 *
 * A cancel that committed while the run was running (its signal lost, or come once the
 * model had answered) is read from the session's row, locked first as a cancel locks it
 * (batch-cancel.ts) so a cancel in progress is waited for and seen: the run then ends
 * `cancelled`, not `outcome`, and parks nothing — as its last append with its end does
 * (cancel-reads.ts `endsCancelled`). An end sent again (its first answer lost) changes
 * nothing and answers what the run's row says.
 */
export async function endRun(
  database: Database,
  fence: Fence,
  runId: string,
  outcome: string,
  detail: RunEndDetail = {},
): Promise<RunEnd> {
  const park = parkedReason(detail.park);
  const runIdText = database.sql`${runId}::text`;
  // One update of the session row (a statement cannot update a row twice): the run's end
  // is activity (`updated_at`), a completed run resets the resume count, a limit parks it.
  const [result] = await database.sql<{ fence_ok: boolean; cancelled: boolean; next: RawRun | null }[]>`
      with cur as (
        select id, ${endsCancelled(database, runIdText)}
          from sessions where id = ${fence.sessionId} and lease_epoch = ${fence.epoch}
           for no key update
      ), r as (
        update runs set status = 'ended', ended_at = now(),
                        ended_reason = case when (select cancelled from cur) then 'cancelled' else ${outcome} end,
                        error = ${detail.error == null ? null : stripNul(detail.error)},
                        usage = ${detail.usage ? JSON.stringify(detail.usage) : null}::jsonb
         where id = ${runId} and (status <> 'ended') is true and exists (select 1 from cur)
        returning ended_reason
      ), s as (
        update sessions
           set updated_at = now(),
               resume_attempts = case when ${outcome === "completed"} then 0 else resume_attempts end,
               next_resume_at = case when ${outcome === "completed"} then null else next_resume_at end,
               status = case when ${park !== null} and status = 'active' and not (select cancelled from cur)
                               and not exists (select 1 from runs q where q.session_id = ${fence.sessionId}
                                                 and q.status = (select 'queued'::text) and q.id <> ${runId})
                             then 'parked' else status end,
               parked_reason = case when ${park !== null} and status = 'active' and not (select cancelled from cur)
                               and not exists (select 1 from runs q where q.session_id = ${fence.sessionId}
                                                 and q.status = (select 'queued'::text) and q.id <> ${runId})
                             then ${park} else parked_reason end
         where id = ${fence.sessionId} and lease_epoch = ${fence.epoch} and exists (select 1 from r)
        returning status
      )
      select exists (select 1 from cur) as fence_ok,
             coalesce((select ended_reason from r), (select ended_reason from runs x where x.id = ${runId}), '')
               = 'cancelled' as cancelled,
             (select row_to_json(q) from runs q where q.session_id = ${fence.sessionId} and q.status = (select 'queued'::text)
                and q.id <> ${runId}
                and coalesce((select status from s),
                             (select status from sessions x where x.id = ${fence.sessionId})) = 'active'
               order by q.queue_seq limit 1) as next`;
  if (!result!.fence_ok) throw new FencedError(fence.sessionId, fence.epoch);
  return { next: result!.next ? runFromRaw(json<RawRun>(result!.next)) : null, cancelled: result!.cancelled };
}

/**
 * Writes why a running run's job failed (a fault the run's loop did not turn into an outcome)
 * as the run's `error`, leaving it `running`: whoever ends it next (the next claim, the
 * sweeper) ends it `crashed` or `stalled` as before, and the reason stays. Fenced: only while
 * the session's epoch is `fence.epoch` and the run is still running, so a holder that lost
 * the session, or a run ended meanwhile, is left as it is. True when it was written.
 */
export async function recordRunFailure(
  database: Database,
  fence: Fence,
  runId: string,
  error: string,
): Promise<boolean> {
  const rows = await database.sql`
      update runs set error = ${stripNul(error)}
       where id = ${runId} and session_id = ${fence.sessionId} and (status = 'running') is true
         and exists (select 1 from sessions where id = ${fence.sessionId} and lease_epoch = ${fence.epoch})
      returning 1`;
  return rows.length > 0;
}
