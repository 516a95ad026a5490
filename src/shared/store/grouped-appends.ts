/**
 * The worker's appends as statements (fenced-writes.ts calls them through group-commit.ts):
 * mid-run appends (`appendStep`) and a run's last append with its end (`appendAndEndRun`),
 * each for one session alone and for many sessions together. The grouped form does for each
 * session exactly what the single one does, with the same fence (epoch and `last_seq`).
 */
import type { Database } from "../db/client.js";
import { endsCancelled, runCancelled, statusForRun } from "./cancel-reads.js";
import type { GroupedAnswer } from "./group-commit.js";
import { countBytes } from "./history-bytes.js";
import type { NewMessageRow, RawRun } from "./rows.js";

/** One session's append, as the statements take it. */
export type SessionAppend = {
  sessionId: string;
  epoch: number;
  lastSeq: number;
  tail: string;
  tokens: number;
  /** The bytes of `rows` (history-bytes.ts), added to the session's stored count. */
  bytes: number;
  runId: string | null;
  rows: NewMessageRow[];
};

/** A run's last append and its end (`park`: the parked reason, when a limit parks the session). */
export type EndingAppend = SessionAppend & {
  runId: string;
  outcome: string;
  error: string | null;
  /** The run's usage (an object, stored as jsonb). */
  usage: unknown;
  park: string | null;
};

export type Inserted = { seq: number; created_at: string };

/**
 * `inserted` empty: the fence did not match (the session, its epoch or its `last_seq` moved).
 * `sessionEvents`: the session's setting as the append found it (PATCH /v1/sessions/:id may
 * change it while a job runs); null when the fence did not match.
 */
export type AppendOutcome = { inserted: Inserted[]; status: string | null; sessionEvents: boolean | null };
export type EndingOutcome = {
  fenceOk: boolean;
  /**
   * A cancel committed while this run was running (`endsCancelled`): the run was ended
   * `cancelled`, whatever outcome its worker sent, and nothing parked the session for it.
   */
  cancelled: boolean;
  inserted: Inserted[];
  next: RawRun | null;
  sessionEvents: boolean | null;
};

const parse = <T>(value: T | string): T => (typeof value === "string" ? (JSON.parse(value) as T) : value);

/**
 * The grouped statements' input (pure): per append, exactly the fields their `i` reads, built
 * field by field. It spread each append into a new object first, which copied its camelCase
 * fields into the JSON beside their snake_case twins (read by nothing) and cost a slow
 * object copy per append on the worker's hot path.
 */
export function groupedInput(appends: readonly (SessionAppend | EndingAppend)[]): string {
  return JSON.stringify(
    appends.map((a, k) => {
      const row: Record<string, unknown> = {
        k,
        session_id: a.sessionId,
        epoch: a.epoch,
        last_seq: a.lastSeq,
        tail: a.tail,
        tokens: a.tokens,
        bytes: a.bytes,
        run_id: a.runId,
        rows: a.rows,
      };
      // A run's last append carries its end too (endingAppendsTogether reads these four).
      if ("outcome" in a) {
        row.outcome = a.outcome;
        row.error = a.error;
        row.usage = a.usage;
        row.park = a.park;
      }
      return row;
    }),
  );
}

/**
 * The grouped statements' lock: the sessions' rows in id order, skipping a busy one (`i`: the
 * input, whose LIMIT tells the planner how many rows it has, so the rows are found by key).
 * A run's end checks `(status <> 'ended') is true`: no index serves that form, so the run is
 * reached by its id, never by reading every unfinished run (grouped-claims.ts says why).
 */
const lockRows = (database: Database) => database.sql`
  select s.id from sessions s where s.id in (select session_id from i) order by s.id for update skip locked`;

/** The grouped statements' insert: each fenced session's (`s`) messages, numbered by its caller. */
const insertMessages = (database: Database) => database.sql`
  insert into messages (session_id, seq, role, content, tool_calls, tool_call_id, call_seq, name, success, stop_reason, usage, provider_state, run_id)
  select s.id, m.seq, m.role, m.content, m.tool_calls, m.tool_call_id, m.call_seq, m.name, m.success, m.stop_reason, m.usage, m.provider_state, i.run_id
    from s join i on i.k = s.k cross join jsonb_to_recordset(i.rows) as m(
    seq int, role text, content text, tool_calls jsonb, tool_call_id text, call_seq int,
    name text, success boolean, stop_reason text, usage jsonb, provider_state jsonb)
  returning session_id, seq, created_at`;

export async function appendsTogether(
  database: Database,
  appends: SessionAppend[],
): Promise<GroupedAnswer<AppendOutcome>[]> {
  const rows = await database.sql<
    {
      locked: boolean;
      status: string | null;
      session_events: boolean | null;
      inserted: Inserted[] | string;
    }[]
  >`
    with i as (
      select * from jsonb_to_recordset(${groupedInput(appends)}::jsonb) as i(
        k int, session_id text, epoch bigint, last_seq int, tail text, tokens bigint, bytes bigint, run_id text, rows jsonb)
       limit ${appends.length}
    ), l as materialized (${lockRows(database)}), s as (
      update sessions
         set last_seq = i.last_seq + jsonb_array_length(i.rows), tail_state = i.tail,
             tokens_used = sessions.tokens_used + i.tokens, last_active_at = now(),
             ${countBytes(database.sql, database.sql`i.bytes`, database.sql`i.last_seq + jsonb_array_length(i.rows)`)}
        from i join l on l.id = i.session_id
       where sessions.id = l.id and sessions.lease_epoch = i.epoch and sessions.last_seq = i.last_seq
      returning i.k, sessions.id, ${statusForRun(database, database.sql`i.run_id`)}, sessions.session_events
    ), ins as (${insertMessages(database)})
    select exists (select 1 from l where l.id = i.session_id) as locked,
           (select s.status from s where s.k = i.k) as status,
           (select s.session_events from s where s.k = i.k) as session_events,
           (select coalesce(json_agg(json_build_object('seq', ins.seq, 'created_at', ins.created_at)), '[]'::json)
              from ins where ins.session_id = i.session_id) as inserted
      from i order by i.k`;
  return rows.map((row) =>
    row.locked
      ? {
          locked: true,
          out: { inserted: parse(row.inserted), status: row.status, sessionEvents: row.session_events },
        }
      : { locked: false },
  );
}

export async function endingAppendsTogether(
  database: Database,
  appends: EndingAppend[],
): Promise<GroupedAnswer<EndingOutcome>[]> {
  // The session update parks the session when a limit was reached and no other run waits,
  // resets the resume count after a completed run, and is the fence, as in appendAndEndRun.
  const rows = await database.sql<
    {
      locked: boolean;
      fence_ok: boolean;
      cancelled: boolean;
      session_events: boolean | null;
      inserted: Inserted[] | string;
      next: RawRun | string | null;
    }[]
  >`
    with i as (
      select * from jsonb_to_recordset(${groupedInput(appends)}::jsonb) as i(
        k int, session_id text, epoch bigint, last_seq int, tail text, tokens bigint, bytes bigint, run_id text, rows jsonb,
        outcome text, error text, usage jsonb, park text)
       limit ${appends.length}
    ), l as materialized (${lockRows(database)}), s as (
      update sessions
         set last_seq = i.last_seq + jsonb_array_length(i.rows), tail_state = i.tail,
             tokens_used = sessions.tokens_used + i.tokens, last_active_at = now(), updated_at = now(),
             ${countBytes(database.sql, database.sql`i.bytes`, database.sql`i.last_seq + jsonb_array_length(i.rows)`)},
             resume_attempts = case when i.outcome = 'completed' then 0 else sessions.resume_attempts end,
             next_resume_at = case when i.outcome = 'completed' then null else sessions.next_resume_at end,
             status = case when i.park is not null and sessions.status = 'active'
                             and not ${runCancelled(database, database.sql`i.run_id`)}
                             and not exists (select 1 from runs q where q.session_id = sessions.id
                                               and q.status = (select 'queued'::text) and q.id <> i.run_id)
                           then 'parked' else sessions.status end,
             parked_reason = case when i.park is not null and sessions.status = 'active'
                             and not ${runCancelled(database, database.sql`i.run_id`)}
                             and not exists (select 1 from runs q where q.session_id = sessions.id
                                               and q.status = (select 'queued'::text) and q.id <> i.run_id)
                           then i.park else sessions.parked_reason end
        from i join l on l.id = i.session_id
       where sessions.id = l.id and sessions.lease_epoch = i.epoch and sessions.last_seq = i.last_seq
      returning i.k, sessions.id, sessions.status, sessions.session_events,
                ${endsCancelled(database, database.sql`i.run_id`)}
    ), ins as (${insertMessages(database)}), r as (
      update runs set status = 'ended', ended_at = now(), error = i.error, usage = i.usage,
                      ended_reason = case when s.cancelled then 'cancelled' else i.outcome end
        from s join i on i.k = s.k
       where runs.id = i.run_id and (runs.status <> 'ended') is true
      returning runs.id
    )
    select exists (select 1 from l where l.id = i.session_id) as locked,
           exists (select 1 from s where s.k = i.k) as fence_ok,
           exists (select 1 from s where s.k = i.k and s.cancelled) as cancelled,
           (select s.session_events from s where s.k = i.k) as session_events,
           (select coalesce(json_agg(json_build_object('seq', ins.seq, 'created_at', ins.created_at)), '[]'::json)
              from ins where ins.session_id = i.session_id) as inserted,
           (select row_to_json(q) from runs q where q.session_id = i.session_id and q.status = (select 'queued'::text)
              and q.id <> i.run_id and (select s.status from s where s.k = i.k) = 'active'
             order by q.queue_seq limit 1) as next
      from i order by i.k`;
  return rows.map((row) =>
    row.locked
      ? {
          locked: true,
          out: {
            fenceOk: row.fence_ok,
            cancelled: row.cancelled,
            inserted: parse(row.inserted),
            next: row.next ? parse(row.next) : null,
            sessionEvents: row.session_events,
          },
        }
      : { locked: false },
  );
}
