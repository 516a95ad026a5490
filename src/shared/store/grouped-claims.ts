/**
 * Claims as statements (session-claims.ts calls them through group-commit.ts):
 * one session alone, or every session whose job started in the same turn of the event loop
 * together — a worker taking many new sessions at once (its start ramp) makes one statement
 * where it made one per session. The grouped form does for each session exactly what the
 * single one does: bump the epoch, end runs an earlier holder left running, read the agent,
 * the next queued run and the history (when short: INLINE_HISTORY_MAX), and start that run
 * when it needs nothing from the history (`startFirst`).
 */
import type { Database } from "../db/client.js";
import type { GroupedAnswer } from "./group-commit.js";
import { countBytes } from "./history-bytes.js";
import { INLINE_HISTORY_MAX } from "./history-reads.js";
import type { RawMessage, RawRun } from "./rows.js";

export type ClaimRequest = { sessionId: string; workerId: string; startFirst: boolean; tail: string };

/**
 * A run an earlier holder left running, ended by a claim: `crashed`, or `cancelled` when a
 * cancel found it running (contracts §9; its signal reached no worker), as its worker's end
 * and the sweeper's would be (cancel-reads.ts `endsCancelled`, read from the claimed row).
 */
export type StaleRun = { id: string; kind: "run" | "resume"; outcome: "crashed" | "cancelled" };

/** What the claim statement reads (json columns may arrive as text); null: no such session. */
export type ClaimRow = {
  lease_epoch: string;
  agent: unknown;
  tokens_used: string;
  session_events: boolean;
  /** The session's last append or claim before this claim (the statement's snapshot, before its update). */
  active_before: string | Date;
  /** The runs an earlier holder left running, ended by the claim: `crashed`, or `cancelled` (`StaleRun`). */
  stale: StaleRun[] | string;
  next: RawRun | string | null;
  started: { seq: number; created_at: string } | string | null;
  /** Null for a history longer than INLINE_HISTORY_MAX: read after the claim (history-reads.ts). */
  history: RawMessage[] | string | null;
} | null;

export async function claimAlone(database: Database, claim: ClaimRequest): Promise<ClaimRow> {
  const { sessionId, workerId, startFirst, tail } = claim;
  const rows = await database.sql<NonNullable<ClaimRow>[]>`
    with cur as (
      select id, status, last_seq, last_active_at from sessions where id = ${sessionId} for update
    ), q as (
      select q.* from runs q, cur
       where q.session_id = ${sessionId} and q.status = (select 'queued'::text) and cur.status = 'active'
       order by q.queue_seq limit 1
    ), r as (
      update runs set status = 'running', started_at = now(), worker_id = ${workerId}, resume_kind = null
       where ${startFirst} and id = (select id from q) and (status = 'queued') is true and kind = 'run'
         and started_at is null and (select last_seq from cur) = 0
      returning id, input
    ), e as (
      update sessions set lease_epoch = lease_epoch + 1, lease_owner = ${workerId}, last_active_at = now(),
                          last_seq = last_seq + (select count(*)::int from r),
                          ${countBytes(
                            database.sql,
                            database.sql`(select coalesce(sum(octet_length(coalesce(r.input, ''))), 0) from r)`,
                            database.sql`sessions.last_seq + (select count(*)::int from r)`,
                          )},
                          tail_state = case when exists (select 1 from r) then ${tail} else tail_state end,
                          run_started = run_started or exists (select 1 from r),
                          updated_at = case when exists (select 1 from r) then now() else updated_at end
       where id = (select id from cur)
      returning lease_epoch, agent, tokens_used, status, session_events, cancelled_runs
    ), stale as (
      update runs set status = 'ended', ended_at = now(),
                      ended_reason = case when coalesce(runs.id = any(e.cancelled_runs), false) or e.status = 'cancelled'
                                         then 'cancelled' else 'crashed' end
        from e
       where runs.session_id = ${sessionId} and runs.status = (select 'running'::text)
      returning runs.id, runs.kind, runs.ended_reason as outcome
    ), ins as (
      insert into messages (session_id, seq, role, content, run_id)
      select ${sessionId}, 1, 'user', coalesce(r.input, ''), r.id from r, e
      returning seq, created_at
    )
    select e.lease_epoch, e.agent, e.tokens_used, e.session_events,
           (select last_active_at from cur) as active_before,
           (select coalesce(json_agg(json_build_object('id', id, 'kind', kind, 'outcome', outcome)), '[]'::json)
              from stale) as stale,
           (select row_to_json(q) from q where e.status = 'active') as next,
           (select json_build_object('seq', seq, 'created_at', created_at) from ins) as started,
           case when (select last_seq from cur) <= ${INLINE_HISTORY_MAX} then
             (select coalesce(json_agg(row_to_json(m) order by m.seq), '[]'::json)
                from messages m where m.session_id = ${sessionId}) end as history
      from e`;
  return rows[0] ?? null;
}

export async function claimsTogether(
  database: Database,
  claims: ClaimRequest[],
): Promise<GroupedAnswer<ClaimRow>[]> {
  const input = JSON.stringify(
    claims.map((c, k) => ({
      k,
      session_id: c.sessionId,
      worker_id: c.workerId,
      start_first: c.startFirst,
      tail: c.tail,
    })),
  );
  // Per session, as in claimAlone: `q` its next queued run, `r` that run started, `e` the
  // session taken (new epoch), `stale` the runs an earlier holder left running, `ins` the
  // started run's user message.
  //
  // Plans that hold after a big batch, before Postgres analyzed `runs` again (its statistics
  // then say almost no run is queued): `i` states its size (the LIMIT; a set-returning
  // function is otherwise guessed at 100 rows, which made small and mid-sized tables
  // seq-scanned), runs are looked up per session (lateral, on runs_session_state_idx, with
  // the state as `(select 'queued'::text)` so that no partial index of `runs` qualifies; see
  // schema.ts), and the updates' state checks are written `(…) is true`, which no index
  // serves, so those runs are reached by id. The old form read every queued run once per
  // session: 5,000 queued, 16 claims, 5,184 index entries and 10,000 rows
  // (test/plans-under-backlog.test.ts).
  const rows = await database.sql<({ locked: boolean } & Partial<NonNullable<ClaimRow>>)[]>`
    with i as (
      select * from jsonb_to_recordset(${input}::jsonb) as i(
        k int, session_id text, worker_id text, start_first boolean, tail text)
       limit ${claims.length}
    ), cur as materialized (
      select s.id, s.status, s.last_seq, s.last_active_at from sessions s where s.id in (select session_id from i)
       order by s.id for update skip locked
    ), q as (
      select q.* from cur cross join lateral (
        select * from runs q where q.session_id = cur.id and q.status = (select 'queued'::text)
         order by q.queue_seq limit 1) q
       where cur.status = 'active'
    ), r as (
      update runs set status = 'running', started_at = now(), worker_id = i.worker_id, resume_kind = null
        from q join i on i.session_id = q.session_id join cur on cur.id = q.session_id
       where runs.id = q.id and i.start_first and (runs.status = 'queued') is true and runs.kind = 'run'
         and runs.started_at is null and cur.last_seq = 0
      returning runs.id, runs.session_id, runs.input
    ), e as (
      update sessions set lease_epoch = sessions.lease_epoch + 1, lease_owner = i.worker_id, last_active_at = now(),
                          last_seq = sessions.last_seq + (select count(*)::int from r where r.session_id = sessions.id),
                          ${countBytes(
                            database.sql,
                            database.sql`(select coalesce(sum(octet_length(coalesce(r.input, ''))), 0) from r
                                           where r.session_id = sessions.id)`,
                            database.sql`sessions.last_seq + (select count(*)::int from r where r.session_id = sessions.id)`,
                          )},
                          tail_state = case when exists (select 1 from r where r.session_id = sessions.id) then i.tail
                                            else sessions.tail_state end,
                          run_started = sessions.run_started or exists (select 1 from r where r.session_id = sessions.id),
                          updated_at = case when exists (select 1 from r where r.session_id = sessions.id) then now()
                                            else sessions.updated_at end
        from i join cur on cur.id = i.session_id
       where sessions.id = cur.id
      returning sessions.id, sessions.lease_epoch, sessions.agent, sessions.tokens_used, sessions.status,
                sessions.session_events, sessions.cancelled_runs
    ), stale as (
      update runs set status = 'ended', ended_at = now(),
                      ended_reason = case when coalesce(runs.id = any(e.cancelled_runs), false) or e.status = 'cancelled'
                                         then 'cancelled' else 'crashed' end
        from e cross join lateral (
          select x.id from runs x where x.session_id = e.id and x.status = (select 'running'::text) offset 0) x
       where runs.id = x.id and (runs.status = 'running') is true
      returning runs.id, runs.session_id, runs.kind, runs.ended_reason as outcome
    ), ins as (
      insert into messages (session_id, seq, role, content, run_id)
      select r.session_id, 1, 'user', coalesce(r.input, ''), r.id from r join e on e.id = r.session_id
      returning session_id, seq, created_at
    )
    select exists (select 1 from cur where cur.id = i.session_id) as locked,
           e.lease_epoch, e.agent, e.tokens_used, e.session_events,
           (select cur.last_active_at from cur where cur.id = i.session_id) as active_before,
           (select coalesce(json_agg(json_build_object('id', stale.id, 'kind', stale.kind, 'outcome', stale.outcome)),
                            '[]'::json)
              from stale where stale.session_id = i.session_id) as stale,
           (select row_to_json(q) from q where q.session_id = i.session_id and e.status = 'active') as next,
           (select json_build_object('seq', ins.seq, 'created_at', ins.created_at) from ins
             where ins.session_id = i.session_id) as started,
           case when (select cur.last_seq from cur where cur.id = i.session_id) <= ${INLINE_HISTORY_MAX} then
             (select coalesce(json_agg(row_to_json(m) order by m.seq), '[]'::json)
                from messages m where m.session_id = i.session_id) end as history
      from i left join e on e.id = i.session_id
     order by i.k`;
  return rows.map(({ locked, ...row }) =>
    locked
      ? {
          locked: true,
          out:
            row.lease_epoch === undefined || row.lease_epoch === null ? null : (row as NonNullable<ClaimRow>),
        }
      : { locked: false },
  );
}
