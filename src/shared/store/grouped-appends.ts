/**
 * Group commit for mid-run appends: the appends of every session that has one ready in the
 * same turn of the event loop go to Postgres in one statement (turn-batch.ts). Each is still
 * fenced by its own epoch and `last_seq`, exactly as when it goes alone (fenced-writes.ts):
 * a session whose fence does not match changes nothing and its caller gets a FencedError.
 *
 * The statement never waits for a row lock: it locks the sessions' rows in id order with
 * SKIP LOCKED, so it cannot take part in a deadlock with a cancel or a claim of several
 * sessions. A session whose row was busy, and every append of a statement Postgres refused
 * as a whole (a constraint, a value it cannot store), is retried alone, so one bad append
 * fails only its own caller. A lone append goes alone from the start.
 */
import type { Database } from "../db/client.js";
import type { NewMessageRow } from "./rows.js";

/** One session's append, as the statement takes it. */
export type GroupedAppend = {
  sessionId: string;
  epoch: number;
  lastSeq: number;
  tail: string;
  tokens: number;
  runId: string | null;
  rows: NewMessageRow[];
};

type Inserted = { seq: number; created_at: string };

/** `inserted` empty: the fence did not match (the session, its epoch or its `last_seq` moved). */
export type AppendOutcome = { inserted: Inserted[]; status: string | null };

type Answer = { outcome: AppendOutcome } | { error: unknown } | { busy: true };

export class GroupedAppends {
  constructor(
    private readonly database: Database,
    /** The single-session statement (fenced-writes.ts). */
    private readonly alone: (append: GroupedAppend) => Promise<AppendOutcome>,
  ) {}

  /** Appends many sessions' messages; one answer (or error) per append, in order. */
  async send(appends: GroupedAppend[]): Promise<({ outcome: AppendOutcome } | { error: unknown })[]> {
    const answers: Answer[] = new Array(appends.length);
    // One append per session in the statement (a session has one writer; this keeps it so).
    const seen = new Set<string>();
    const grouped: number[] = [];
    appends.forEach((append, i) => {
      if (seen.has(append.sessionId)) answers[i] = { busy: true };
      else {
        seen.add(append.sessionId);
        grouped.push(i);
      }
    });
    if (grouped.length > 1) {
      try {
        const rows = await this.together(grouped.map((i) => appends[i]!));
        for (const [j, i] of grouped.entries()) {
          const row = rows[j]!;
          answers[i] = row.locked
            ? { outcome: { inserted: row.inserted, status: row.status } }
            : { busy: true };
        }
      } catch {
        // Refused as a whole: each goes alone below, and only a bad one fails.
        for (const i of grouped) answers[i] = { busy: true };
      }
    } else for (const i of grouped) answers[i] = { busy: true };
    return Promise.all(
      answers.map(async (answer, i) => {
        if (!("busy" in answer)) return answer;
        try {
          return { outcome: await this.alone(appends[i]!) };
        } catch (error) {
          return { error };
        }
      }),
    );
  }

  private async together(
    appends: GroupedAppend[],
  ): Promise<{ locked: boolean; status: string | null; inserted: Inserted[] }[]> {
    const input = appends.map((a, k) => ({
      k,
      session_id: a.sessionId,
      epoch: a.epoch,
      last_seq: a.lastSeq,
      tail: a.tail,
      tokens: a.tokens,
      run_id: a.runId,
      rows: a.rows,
    }));
    const rows = await this.database.sql<
      { k: number; locked: boolean; status: string | null; inserted: Inserted[] | string }[]
    >`
      with i as (
        select * from jsonb_to_recordset(${JSON.stringify(input)}::jsonb) as i(
          k int, session_id text, epoch bigint, last_seq int, tail text, tokens bigint, run_id text, rows jsonb)
      ), l as materialized (
        select s.id from sessions s where s.id in (select session_id from i)
         order by s.id for update skip locked
      ), s as (
        update sessions
           set last_seq = i.last_seq + jsonb_array_length(i.rows), tail_state = i.tail,
               tokens_used = sessions.tokens_used + i.tokens, last_active_at = now()
          from i join l on l.id = i.session_id
         where sessions.id = l.id and sessions.lease_epoch = i.epoch and sessions.last_seq = i.last_seq
        returning i.k, sessions.id, sessions.status
      ), ins as (
        insert into messages (session_id, seq, role, content, tool_calls, tool_call_id, call_seq, name, success, stop_reason, usage, provider_state, run_id)
        select s.id, m.seq, m.role, m.content, m.tool_calls, m.tool_call_id, m.call_seq, m.name, m.success, m.stop_reason, m.usage, m.provider_state, i.run_id
          from s join i on i.k = s.k cross join jsonb_to_recordset(i.rows) as m(
          seq int, role text, content text, tool_calls jsonb, tool_call_id text, call_seq int,
          name text, success boolean, stop_reason text, usage jsonb, provider_state jsonb)
        returning session_id, seq, created_at
      )
      select i.k, exists (select 1 from l where l.id = i.session_id) as locked,
             (select s.status from s where s.k = i.k) as status,
             (select coalesce(json_agg(json_build_object('seq', ins.seq, 'created_at', ins.created_at)), '[]'::json)
                from ins where ins.session_id = i.session_id) as inserted
        from i order by i.k`;
    return rows.map((row) => ({
      locked: row.locked,
      status: row.status,
      inserted: typeof row.inserted === "string" ? (JSON.parse(row.inserted) as Inserted[]) : row.inserted,
    }));
  }
}
