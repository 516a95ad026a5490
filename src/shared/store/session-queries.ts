/**
 * Reads, and the writes that need no lease: creating a session (optionally importing its
 * history) and queueing runs. Queued runs do not touch the history, so they never race a
 * worker; the worker appends their input when it takes them, under its lease.
 */
import { randomUUID } from "node:crypto";
import { and, desc, eq, ne } from "drizzle-orm";
import type { AgentConfig, ModelConfig } from "../agent-config.js";
import type { Database } from "../db/client.js";
import { type RunRow, runs, type SessionRow, sessions } from "../db/schema.js";
import type { Message, StoredMessage } from "../messages.js";
import { QUEUES } from "../queues.js";
import { tailState } from "../tail-state.js";
import { DEFAULT_TENANT } from "./api-keys.js";
import {
  json,
  messageFromRaw,
  type RawMessage,
  type RawRun,
  type RawSession,
  runFromRaw,
  sessionFromRaw,
  toNewRows,
} from "./rows.js";

export type NewSession = {
  agent: AgentConfig;
  metadata?: Record<string, unknown>;
  messages?: readonly Message[];
  /** The first user message: stored on a queued run in the same transaction. */
  input?: string;
  id?: string;
  /** Whose session it is (contracts §10); `default` when not given. */
  tenant?: string;
};

export type NewRun = {
  sessionId: string;
  kind: "run" | "resume";
  trigger: "api" | "sweeper" | "worker" | "cli";
  input?: string;
  resumeKind?: string;
  model?: ModelConfig;
  /** For resumes of an interrupted run: its last sign of life. */
  lastSignAt?: Date;
};

export class SessionQueries {
  constructor(private readonly database: Database) {}

  /** Creates a session; an imported history is stored as it is (validated by the caller). */
  async createSession(input: NewSession): Promise<{ id: string }> {
    const [created] = await this.createSessions([input]);
    return { id: created!.id };
  }

  /**
   * Creates sessions — each with its imported history and, when it has `input`, its first
   * queued run — all in one transaction: a batch is stored whole or not at all.
   */
  async createSessions(inputs: readonly NewSession[]): Promise<{ id: string; runId: string | null }[]> {
    const out: { id: string; runId: string | null }[] = [];
    const sessionRows: unknown[] = [];
    const messageRows: unknown[] = [];
    const runRows: unknown[] = [];
    for (const input of inputs) {
      const id = input.id ?? randomUUID();
      const history = input.messages ?? [];
      const tenant = input.tenant ?? DEFAULT_TENANT;
      sessionRows.push({
        id,
        tenant,
        agent: input.agent,
        metadata: input.metadata ?? {},
        last_seq: history.length,
        tail_state: tailState(history),
      });
      for (const row of toNewRows(history, 0, null)) messageRows.push({ ...row, session_id: id });
      let runId: string | null = null;
      if (input.input !== undefined) {
        runId = randomUUID();
        runRows.push({
          id: runId,
          session_id: id,
          tenant,
          input: input.input,
          job_id: QUEUES.runs.jobId({ sessionId: id, runId }),
        });
      }
      out.push({ id, runId });
    }
    // One statement, so one round trip and all-or-nothing; foreign keys are checked at its end.
    await this.database.sql`
      with s as (
        insert into sessions (id, tenant, agent, metadata, last_seq, tail_state)
        select x.id, x.tenant, x.agent, x.metadata, x.last_seq, x.tail_state
          from jsonb_to_recordset(${JSON.stringify(sessionRows)}::jsonb)
            as x(id text, tenant text, agent jsonb, metadata jsonb, last_seq int, tail_state text)
        returning 1
      ), m as (
        insert into messages (session_id, seq, role, content, tool_calls, tool_call_id, call_seq, name, success, stop_reason, usage)
        select m.session_id, m.seq, m.role, m.content, m.tool_calls, m.tool_call_id, m.call_seq, m.name, m.success, m.stop_reason, m.usage
          from jsonb_to_recordset(${JSON.stringify(messageRows)}::jsonb) as m(
            session_id text, seq int, role text, content text, tool_calls jsonb, tool_call_id text, call_seq int,
            name text, success boolean, stop_reason text, usage jsonb)
        returning 1
      )
      insert into runs (id, session_id, tenant, kind, trigger, input, job_id)
      select r.id, r.session_id, r.tenant, 'run', 'api', r.input, r.job_id
        from jsonb_to_recordset(${JSON.stringify(runRows)}::jsonb)
          as r(id text, session_id text, tenant text, input text, job_id text)`;
    return out;
  }

  /**
   * Sessions for operators, newest activity first; `parked` filters on parking, `tenant`
   * (when given) on ownership.
   */
  async listSessions(filter: { parked?: boolean; limit: number; tenant?: string }): Promise<SessionRow[]> {
    const conditions = [
      filter.tenant === undefined ? undefined : eq(sessions.tenant, filter.tenant),
      filter.parked === undefined
        ? undefined
        : filter.parked
          ? eq(sessions.status, "parked")
          : ne(sessions.status, "parked"),
    ];
    return this.database.db
      .select()
      .from(sessions)
      .where(and(...conditions))
      .orderBy(desc(sessions.updatedAt))
      .limit(filter.limit);
  }

  /**
   * Makes a parked session active again (someone acted on it: new input or an explicit
   * resume); its count of automatic resumes starts over.
   */
  async unpark(id: string): Promise<boolean> {
    const rows = await this.database.sql`
      update sessions set status = 'active', parked_reason = null, resume_attempts = 0,
                          next_resume_at = null, updated_at = now()
       where id = ${id} and status = 'parked' returning 1`;
    return rows.length > 0;
  }

  // The reads below run on every job and every poll: plain postgres.js statements, which it
  // prepares once per connection (drizzle's builder sends each query unprepared). `tenant`:
  // the API passes the caller's, so another tenant's row reads as missing; the worker, the
  // sweeper and the operator's CLI pass none (any tenant).

  /** ` and ALIAS.tenant = $n`, or nothing when no tenant is given. */
  private ofTenant(alias: "s" | "r", tenant: string | undefined) {
    const { sql } = this.database;
    return tenant === undefined ? sql`` : sql`and ${sql(alias)}.tenant = ${tenant}`;
  }

  async getSession(id: string, tenant?: string): Promise<SessionRow | undefined> {
    const [row] = await this.database.sql<{ s: string | RawSession }[]>`
      select row_to_json(s) as s from sessions s where s.id = ${id} ${this.ofTenant("s", tenant)}`;
    return row ? sessionFromRaw(json<RawSession>(row.s)) : undefined;
  }

  async loadHistory(sessionId: string): Promise<StoredMessage[]> {
    const rows = await this.database.sql<{ m: string | RawMessage }[]>`
      select row_to_json(m) as m from messages m where m.session_id = ${sessionId} order by m.seq`;
    return rows.map((row) => messageFromRaw(json<RawMessage>(row.m)));
  }

  async listRuns(sessionId: string, tenant?: string): Promise<RunRow[]> {
    const rows = await this.database.sql<{ r: string | RawRun }[]>`
      select row_to_json(r) as r from runs r where r.session_id = ${sessionId} ${this.ofTenant("r", tenant)}
       order by r.created_at, r.id`;
    return rows.map((row) => runFromRaw(json<RawRun>(row.r)));
  }

  async getRun(runId: string, tenant?: string): Promise<RunRow | undefined> {
    const [row] = await this.database.sql<{ r: string | RawRun }[]>`
      select row_to_json(r) as r from runs r where r.id = ${runId} ${this.ofTenant("r", tenant)}`;
    return row ? runFromRaw(json<RawRun>(row.r)) : undefined;
  }

  /** The oldest queued run of a session: runs are taken in the order they were asked for. */
  async nextQueuedRun(sessionId: string): Promise<RunRow | undefined> {
    const [row] = await this.database.sql<{ r: string | RawRun }[]>`
      select row_to_json(r) as r from runs r where r.session_id = ${sessionId} and r.status = 'queued'
       order by r.created_at, r.id limit 1`;
    return row ? runFromRaw(json<RawRun>(row.r)) : undefined;
  }

  /**
   * Queues a run. A resume joins the session's resume that is already waiting or running
   * (at most one per session, enforced by a unique index), so replays change nothing.
   */
  async createRun(run: NewRun, attempt = 0): Promise<{ run: RunRow; created: boolean }> {
    const id = randomUUID();
    const inserted = await this.database.sql<{ r: string | RawRun }[]>`
      insert into runs (id, session_id, tenant, kind, trigger, input, resume_kind, model, job_id, last_sign_at)
      values (${id}, ${run.sessionId}, (select tenant from sessions where id = ${run.sessionId}), ${run.kind},
              ${run.trigger}, ${run.input ?? null}, ${run.resumeKind ?? null},
              ${run.model ? JSON.stringify(run.model) : null}::jsonb, ${QUEUES.runs.jobId({ sessionId: run.sessionId, runId: id })}, ${run.lastSignAt?.toISOString() ?? null})
      on conflict (session_id) where kind = 'resume' and status <> 'ended' do nothing
      returning row_to_json(runs) as r`;
    if (inserted[0]) return { run: runFromRaw(json<RawRun>(inserted[0].r)), created: true };
    const [active] = await this.database.db
      .select()
      .from(runs)
      .where(and(eq(runs.sessionId, run.sessionId), eq(runs.kind, "resume"), ne(runs.status, "ended")));
    if (active) return { run: active, created: false };
    // The active resume ended between the insert and the read: try again.
    if (attempt < 3) return this.createRun(run, attempt + 1);
    throw new Error(`could not queue a resume for session ${run.sessionId}`);
  }
}
