/**
 * Cancelling a session or a whole batch (contracts §9, BatchStore's `cancel`): the sessions,
 * their queued runs and the batch's row, in one transaction.
 */
import type { Database } from "../db/client.js";
import { json } from "./rows.js";

/**
 * A queued run a cancel ended. `handedBack`: it had started and was waiting for its
 * endpoint's capacity (contracts §15), so its request is still counted there as waiting.
 */
export type DroppedRun = {
  id: string;
  sessionId: string;
  kind: string;
  handedBack: boolean;
  /** false: its session has no event stream (no RUN_COMPLETED is written for it). */
  sessionEvents: boolean;
};

/** A run a cancel found running: its worker is told to abort it (worker-signals.ts). */
export type RunningRun = { id: string; sessionId: string };

/**
 * Cancels sessions (contracts §9) in one statement: those not yet terminal become
 * `cancelled` (never resumed automatically) and their queued runs end `cancelled`. A run
 * that is running is aborted by its worker: it learns it from Redis at once, and from
 * this row before its next tool starts. Returns the cancelled sessions, the dropped runs
 * and the running ones (the signal names them, so that it never aborts a run a new message
 * started after the cancel).
 */
export async function cancelSessions(
  database: Database,
  tenant: string,
  target: { sessionId: string } | { batchId: string },
): Promise<{ sessionIds: string[]; dropped: DroppedRun[]; running: RunningRun[] }> {
  const { sql } = database;
  const where = "sessionId" in target ? sql`s.id = ${target.sessionId}` : sql`s.batch_id = ${target.batchId}`;
  return sql.begin(async (tx) => {
    // The batch's row is locked first, so that no part is appended while its sessions are
    // cancelled (appends lock it too, session-creation.ts).
    const [batch] =
      "batchId" in target
        ? await tx<{ open: boolean }[]>`
              select open from batches where id = ${target.batchId} and tenant = ${tenant}
                 and deleted_at is null for update`
        : [];
    // The sessions are locked first, in a statement of their own: a sweeper or worker that
    // is queueing an automatic resume of one of them (under that row's lock,
    // automatic-resumes.ts) commits before this returns, and the update below, which reads
    // a newer snapshot, sees that run and drops it. Locked by the update alone, such a run
    // was invisible to it and stayed queued on the cancelled session for ever (its
    // resume-point answering `running`).
    await tx`select s.id from sessions s
                where ${where} and s.tenant = ${tenant} and s.status = 'active'
                order by s.id for no key update of s`;
    const [row] = await tx<
      { sessions: string[] | string; dropped: DroppedRun[] | string; running: RunningRun[] | string }[]
    >`
        with c as (
          update sessions s set status = 'cancelled', cancelled_at = now(), next_resume_at = null,
                                updated_at = now(),
                                cancelled_runs = (select array_agg(r.id) from runs r
                                                   where r.session_id = s.id and r.status = 'running')
           where ${where} and s.tenant = ${tenant} and s.status = 'active'
             and (exists (select 1 from runs r where r.session_id = s.id and r.status <> 'ended')
                  or (s.run_started and s.tail_state <> 'completed'))
          returning s.id, s.session_events
        ), q as (
          update runs r set status = 'ended', ended_reason = 'cancelled', ended_at = now(),
                            error = 'cancelled by request'
           where r.session_id in (select id from c) and r.status = 'queued'
          returning r.id, r.session_id, r.kind, r.started_at is not null as handed_back,
                    (select c.session_events from c where c.id = r.session_id) as session_events
        )
        select (select coalesce(json_agg(id), '[]'::json) from c) as sessions,
               (select coalesce(json_agg(json_build_object('id', id, 'sessionId', session_id, 'kind', kind,
                                                           'handedBack', handed_back,
                                                           'sessionEvents', session_events)), '[]'::json)
                  from q) as dropped,
               (select coalesce(json_agg(json_build_object('id', r.id, 'sessionId', r.session_id)), '[]'::json)
                  from runs r where r.session_id in (select id from c) and r.status = 'running') as running`;
    const sessionIds = json<string[]>(row!.sessions);
    // A batch is marked cancelled only when the cancel stopped something: sessions that had
    // not ended, or more parts (an open batch). A batch whose sessions had all ended keeps
    // its status (`ended`, as its webhook said), like its sessions keep theirs.
    if ("batchId" in target && batch && (batch.open || sessionIds.length > 0)) {
      await tx`update batches set cancelled_at = coalesce(cancelled_at, now()), open = false
                  where id = ${target.batchId} and tenant = ${tenant}`;
    }
    return {
      sessionIds,
      dropped: json<DroppedRun[]>(row!.dropped),
      running: json<RunningRun[]>(row!.running),
    };
  });
}
