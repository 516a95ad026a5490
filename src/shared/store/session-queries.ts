/**
 * Reads, and the writes that need no lease: creating a session (optionally importing its
 * history) and queueing runs. Queued runs do not touch the history, so they never race a
 * worker; the worker appends their input when it takes them, under its lease.
 */
import { randomUUID } from "node:crypto";
import type postgres from "postgres";
import type { AgentConfig, ModelConfig } from "../agent-config.js";
import type { Database } from "../db/client.js";
import type { RunRow, SessionRow } from "../db/schema.js";
import { ConflictError, NotFoundError, ValidationError } from "../errors.js";
import type { Message, StoredMessage } from "../messages.js";
import type { UsageTotals } from "../prices.js";
import { QUEUES } from "../queues.js";
import { type ResumePointJson, resumePoint, toResumePointJson } from "../resume-point.js";
import { tailState } from "../tail-state.js";
import { importedTokens } from "../usage.js";
import { hasQueuedRuns, holdActiveSessions } from "./active-sessions.js";
import { DEFAULT_TENANT } from "./api-keys.js";
import { hasUnendedRun, readHistory, readHistoryShape } from "./history-reads.js";
import { appendImportedPage } from "./imported-pages.js";
import { json, type RawRun, type RawSession, runFromRaw, sessionFromRaw, toNewRows } from "./rows.js";
import { usageOfSession } from "./session-usage.js";

export type NewSession = {
  agent: AgentConfig;
  metadata?: Record<string, unknown>;
  messages?: readonly Message[];
  /** The first user message: stored on a queued run in the same transaction. */
  input?: string;
  id?: string;
  /** Whose session it is (contracts §10); `default` when not given. */
  tenant?: string;
  /** The caller's id for it within its batch (unique there). */
  customId?: string;
  /**
   * false: no event stream is written for it (contracts §7). A batch's session without it takes
   * the batch's setting; true in a batch created without streams is refused (`refuseStreams`).
   */
  sessionEvents?: boolean;
};

/**
 * A batch created with `sessionEvents: false` promised that none of its sessions has an event
 * stream: a session of it asking for one is a 400 naming `sessions[i].sessionEvents`.
 */
function refuseStreams(batchHasStreams: boolean, inputs: readonly NewSession[]): void {
  if (batchHasStreams) return;
  const i = inputs.findIndex((input) => input.sessionEvents === true);
  if (i >= 0)
    throw new ValidationError(
      `sessions[${i}].sessionEvents`,
      "cannot be true: the batch was created with sessionEvents: false, so none of its sessions has an event stream",
    );
}

/** Where a batch's sessions go: a new batch, or one still open (contracts §9). */
export type BatchTarget = {
  id: string;
  tenant: string;
  /** Insert the batch row (a new batch), or append to an open one of this tenant. */
  create: boolean;
  webhookUrl?: string | null;
  /** After these sessions: whether it takes more (`POST /v1/batches/:id/sessions`). */
  open: boolean;
  /**
   * A new batch's `sessionEvents` (default true); its sessions, also those appended later, take
   * the batch's unless one turns its own stream off.
   */
  sessionEvents?: boolean;
};

/** How the session list filters on state (contracts §9): a session counts by its current state. */
export type ListStatus = "parked" | "active" | "cancelled" | "queued" | "running" | "completed";

/** A place in the session list: `updated_at` in microseconds since the epoch, and the id. */
export type ListCursor = { micros: string; id: string };

/** Per-tenant limits checked where runs are queued (contracts §10); none when not given. */
export type RunLimits = { maxActiveSessions?: number };

export type NewRun = {
  sessionId: string;
  kind: "run" | "resume";
  trigger: "api" | "sweeper" | "worker" | "cli";
  input?: string;
  resumeKind?: string;
  model?: ModelConfig;
  /** Goal mode (contracts §8), only for a run with new input. */
  goal?: { text: string; maxRounds: number };
  /** For resumes of an interrupted run: its last sign of life. */
  lastSignAt?: Date;
};

/** A session as the list shows it, with its place in the list's order. */
export type ListedSession = Pick<
  SessionRow,
  "id" | "batchId" | "customId" | "status" | "tailState" | "parkedReason" | "metadata" | "updatedAt"
> & {
  cursor: ListCursor;
  /** Its unfinished run's status, `running` before `queued` (null: none), for its public status. */
  runState: "running" | "queued" | null;
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
  async createSessions(
    inputs: readonly NewSession[],
    limits: RunLimits = {},
    batch?: BatchTarget,
  ): Promise<{ id: string; runId: string | null }[]> {
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
        tokens_used: importedTokens(history),
        batch_id: batch?.id ?? null,
        custom_id: input.customId ?? null,
        // A batch's sessions take the batch's setting (read in the insert: an open batch's),
        // unless they turn their own stream off.
        session_events: batch
          ? input.sessionEvents === false
            ? false
            : null
          : input.sessionEvents !== false,
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
    const newActive = new Map<string, number>();
    for (const run of runRows as { tenant: string }[]) {
      newActive.set(run.tenant, (newActive.get(run.tenant) ?? 0) + 1);
    }
    // One statement, so one round trip and all-or-nothing; foreign keys are checked at its end.
    const insert = (sql: postgres.Sql | postgres.TransactionSql) => sql`
      with s as (
        insert into sessions (id, tenant, agent, metadata, last_seq, tail_state, tokens_used, batch_id, custom_id, session_events)
        select x.id, x.tenant, x.agent, x.metadata, x.last_seq, x.tail_state, x.tokens_used, x.batch_id, x.custom_id,
               coalesce(x.session_events, (select b.session_events from batches b where b.id = x.batch_id), true)
          from jsonb_to_recordset(${JSON.stringify(sessionRows)}::jsonb)
            as x(id text, tenant text, agent jsonb, metadata jsonb, last_seq int, tail_state text, tokens_used bigint,
                 batch_id text, custom_id text, session_events boolean)
        returning 1
      ), m as (
        insert into messages (session_id, seq, role, content, tool_calls, tool_call_id, call_seq, name, success, stop_reason, usage, provider_state, created_at)
        select m.session_id, m.seq, m.role, m.content, m.tool_calls, m.tool_call_id, m.call_seq, m.name, m.success, m.stop_reason, m.usage, m.provider_state,
               coalesce(m.created_at, now())
          from jsonb_to_recordset(${JSON.stringify(messageRows)}::jsonb) as m(
            session_id text, seq int, role text, content text, tool_calls jsonb, tool_call_id text, call_seq int,
            name text, success boolean, stop_reason text, usage jsonb, provider_state jsonb, created_at timestamptz)
        returning 1
      )
      insert into runs (id, session_id, tenant, kind, trigger, input, job_id)
      select r.id, r.session_id, r.tenant, 'run', 'api', r.input, r.job_id
        from jsonb_to_recordset(${JSON.stringify(runRows)}::jsonb)
          as r(id text, session_id text, tenant text, input text, job_id text)`;
    const { maxActiveSessions: max } = limits;
    if ((max === undefined || newActive.size === 0) && !batch) {
      await insert(this.database.sql);
      return out;
    }
    await this.database.sql.begin(async (tx) => {
      // The batch first: an append waits here for another append to the same batch.
      if (batch) await this.prepareBatch(tx, batch, inputs);
      // Tenants in one order, so two requests never wait on each other's locks.
      for (const [tenant, adding] of [...newActive].sort(([a], [b]) => (a < b ? -1 : 1))) {
        if (max !== undefined) await holdActiveSessions(tx, tenant, adding, max);
      }
      await insert(tx);
    });
    return out;
  }

  /**
   * Inserts a new batch, or locks an open one of the tenant for an append and refuses a
   * `customId` it already holds (400 naming `sessions[i].customId`); closes it when asked.
   */
  private async prepareBatch(
    tx: postgres.TransactionSql,
    batch: BatchTarget,
    inputs: readonly NewSession[],
  ): Promise<void> {
    if (batch.create) {
      refuseStreams(batch.sessionEvents !== false, inputs);
      await tx`insert into batches (id, tenant, webhook_url, open, session_events)
               values (${batch.id}, ${batch.tenant}, ${batch.webhookUrl ?? null}, ${batch.open},
                       ${batch.sessionEvents !== false})`;
      return;
    }
    const [row] = await tx<{ open: boolean; session_events: boolean }[]>`
      select open, session_events from batches where id = ${batch.id} and tenant = ${batch.tenant}
         and deleted_at is null for update`;
    if (!row) throw new NotFoundError(`batch ${batch.id}`);
    if (!row.open)
      throw new ConflictError("batch_closed", `batch ${batch.id} is closed; it takes no more sessions`);
    refuseStreams(row.session_events, inputs);
    const ids = inputs.flatMap((input) => (input.customId === undefined ? [] : [input.customId]));
    if (ids.length > 0) {
      const taken = await tx<{ custom_id: string }[]>`
        select custom_id from sessions
         where batch_id = ${batch.id}
           and custom_id in (select jsonb_array_elements_text(${JSON.stringify(ids)}::jsonb))`;
      if (taken.length > 0) {
        const held = new Set(taken.map((t) => t.custom_id));
        const i = inputs.findIndex((input) => input.customId !== undefined && held.has(input.customId));
        throw new ValidationError(
          `sessions[${i}].customId`,
          `batch ${batch.id} already has a session with customId ${JSON.stringify(inputs[i]!.customId)}`,
        );
      }
    }
    if (!batch.open) await tx`update batches set open = false where id = ${batch.id}`;
  }

  /**
   * Sessions for operators, newest activity first; `parked` filters on parking, `tenant`
   * (when given) on ownership.
   */
  async listSessions(filter: {
    parked?: boolean;
    limit: number;
    tenant?: string;
    /** Only the sessions of this batch. */
    batchId?: string;
    /** By current state (wins over `parked`). */
    status?: ListStatus;
    /** Only parked sessions parked for this reason. */
    parkedReason?: string;
    /** Only the sessions after this one in the list's order (a page's `cursor`). */
    before?: ListCursor;
  }): Promise<ListedSession[]> {
    const { sql } = this.database;
    const status =
      filter.status ?? (filter.parked === undefined ? undefined : filter.parked ? "parked" : "active");
    const { before, parkedReason } = filter;
    // A plain postgres.js statement (prepared once per connection), not drizzle's builder,
    // which sent it unprepared: parsing, planning and building it cost the list more than
    // running it. The state is literal SQL (statusCondition), never a parameter, so a
    // cached generic plan can still use the partial index for parked sessions.
    const rows = await sql<
      (Omit<ListedSession, "cursor" | "updatedAt"> & { updatedAt: string | Date; micros: string })[]
    >`
      select s.id, s.batch_id as "batchId", s.custom_id as "customId", s.status, s.tail_state as "tailState",
             s.parked_reason as "parkedReason", s.metadata, s.updated_at as "updatedAt",
             (extract(epoch from s.updated_at) * 1000000)::bigint::text as micros,
             (select r.status from runs r where r.session_id = s.id and r.status in ('running', 'queued')
               order by r.status = 'running' desc limit 1) as "runState"
        from sessions s
       where true
             ${filter.tenant === undefined ? sql`` : sql`and s.tenant = ${filter.tenant}`}
             ${filter.batchId === undefined ? sql`` : sql`and s.batch_id = ${filter.batchId}`}
             ${status === undefined ? sql`` : sql`and ${statusCondition(sql, status)}`}
             ${
               parkedReason === undefined
                 ? sql``
                 : // The reason code (`attempts_exhausted`) matches the stored reason with its
                   // detail (`attempts_exhausted: 3 automatic resumes …`) too.
                   sql`and s.status = 'parked' and (s.parked_reason = ${parkedReason}
                        or s.parked_reason like ${`${parkedReason.replace(/[\\%_]/g, (c) => `\\${c}`)}:%`})`
             }
             ${
               // Keyset paging on (updated_at, id), to the microsecond: a page costs the same at any depth.
               before === undefined
                 ? sql``
                 : sql`and (s.updated_at, s.id) < (timestamptz 'epoch' + ${before.micros}::bigint * interval '1 microsecond', ${before.id})`
             }
       order by s.updated_at desc, s.id desc
       limit ${filter.limit}`;
    // Built field by field: a rest/spread copy of each row cost the list more than its query.
    return rows.map((row) => ({
      id: row.id,
      batchId: row.batchId,
      customId: row.customId,
      status: row.status,
      tailState: row.tailState,
      parkedReason: row.parkedReason,
      metadata: json<Record<string, unknown>>(row.metadata),
      updatedAt: new Date(row.updatedAt),
      cursor: { micros: row.micros, id: row.id },
      runState: row.runState,
    }));
  }

  /**
   * Makes a parked session active again (someone acted on it: new input or an explicit
   * resume); its count of automatic resumes starts over.
   */
  async unpark(id: string): Promise<boolean> {
    return this.unparkWith(this.database.sql, id);
  }

  private async unparkWith(sql: postgres.Sql | postgres.TransactionSql, id: string): Promise<boolean> {
    // A cancelled session is re-opened the same way (contracts §9: a new message re-opens it).
    const rows = await sql`
      update sessions set status = 'active', parked_reason = null, resume_attempts = 0,
                          next_resume_at = null, updated_at = now()
       where id = ${id} and status in ('parked', 'cancelled') returning 1`;
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

  /** The stored messages, in seq order; `afterSeq`: only those after it; `limit`: at most that many. */
  async loadHistory(sessionId: string, afterSeq = 0, limit?: number): Promise<StoredMessage[]> {
    return readHistory(this.database.sql, sessionId, afterSeq, limit);
  }

  /**
   * The session's resume point (contracts §2): `running` while a run of it is queued or running,
   * else `resumePoint` of its history, read without the messages' texts (readHistoryShape).
   */
  async resumePoint(sessionId: string, tenant?: string): Promise<ResumePointJson> {
    if (await hasUnendedRun(this.database.sql, sessionId, tenant))
      return { resumable: false, reason: "running" };
    return toResumePointJson(resumePoint(await readHistoryShape(this.database.sql, sessionId)));
  }

  /** Continues an imported history with a page (imported-pages.ts). */
  appendImported(tenant: string, sessionId: string, afterSeq: number, page: readonly Message[]) {
    return appendImportedPage(this.database, tenant, sessionId, afterSeq, page);
  }

  /** The session's usage totals (with `unknownSteps`), without reading the messages themselves. */
  usageTotals(sessionId: string): Promise<UsageTotals> {
    return usageOfSession(this.database, sessionId);
  }

  async listRuns(sessionId: string, tenant?: string): Promise<RunRow[]> {
    const rows = await this.database.sql<{ r: string | RawRun }[]>`
      select row_to_json(r) as r from runs r where r.session_id = ${sessionId} ${this.ofTenant("r", tenant)}
       order by r.created_at, r.id`;
    return rows.map((row) => runFromRaw(json<RawRun>(row.r)));
  }

  /**
   * The latest `limit` runs of a session before `before` (all when absent), in creation
   * order, each with its place (`cursor`) for the next page: keyset paging on
   * (created_at, id) to the microsecond, on runs_session_idx.
   */
  async listRunsPage(
    sessionId: string,
    tenant: string | undefined,
    page: { limit: number; before?: ListCursor },
  ): Promise<(RunRow & { cursor: ListCursor })[]> {
    const { sql } = this.database;
    const { before } = page;
    const rows = await sql<{ r: string | RawRun; micros: string }[]>`
      select row_to_json(r) as r, (extract(epoch from r.created_at) * 1000000)::bigint::text as micros
        from runs r where r.session_id = ${sessionId} ${this.ofTenant("r", tenant)}
             ${
               before === undefined
                 ? sql``
                 : sql`and (r.created_at, r.id) < (timestamptz 'epoch' + ${before.micros}::bigint * interval '1 microsecond', ${before.id})`
             }
       order by r.created_at desc, r.id desc limit ${page.limit}`;
    return rows.reverse().map((row) => {
      const run = runFromRaw(json<RawRun>(row.r));
      return { ...run, cursor: { micros: row.micros, id: run.id } };
    });
  }

  /** The status of each run of the session that has not ended (what its status depends on). */
  async unfinishedRunStatuses(sessionId: string): Promise<RunRow["status"][]> {
    const rows = await this.database.sql<{ status: RunRow["status"] }[]>`
      select r.status from runs r where r.session_id = ${sessionId} and r.status <> 'ended'`;
    return rows.map((row) => row.status);
  }

  async getRun(runId: string, tenant?: string): Promise<RunRow | undefined> {
    const [row] = await this.database.sql<{ r: string | RawRun }[]>`
      select row_to_json(r) as r from runs r where r.id = ${runId} ${this.ofTenant("r", tenant)}`;
    return row ? runFromRaw(json<RawRun>(row.r)) : undefined;
  }

  /**
   * The oldest queued run of a session: runs are taken in the order they were asked for.
   * `(select 'queued'::text)`: on runs_session_state_idx even right after a batch (grouped-claims.ts).
   */
  async nextQueuedRun(sessionId: string): Promise<RunRow | undefined> {
    const [row] = await this.database.sql<{ r: string | RawRun }[]>`
      select row_to_json(r) as r from runs r where r.session_id = ${sessionId} and r.status = (select 'queued'::text)
       order by r.created_at, r.id limit 1`;
    return row ? runFromRaw(json<RawRun>(row.r)) : undefined;
  }

  /** Whether the tenant has a run waiting to start. */
  tenantHasQueuedRuns(tenant: string): Promise<boolean> {
    return hasQueuedRuns(this.database.sql, tenant);
  }

  /**
   * Queues a run. A resume joins the session's resume that is already waiting or running
   * (at most one per session, enforced by a unique index), so replays change nothing.
   */
  async createRun(
    run: NewRun,
    options: RunLimits & {
      /** The caller's tenant: the session's active-session cap is checked for it. */
      tenant?: string;
      /**
       * Someone acted on it (new input, an explicit resume): a parked or cancelled session is
       * made active again in the same transaction, as its status is under the row's lock.
       */
      unpark?: boolean;
    } = {},
    attempt = 0,
  ): Promise<{ run: RunRow; created: boolean }> {
    const { maxActiveSessions: max, tenant } = options;
    return this.database.sql.begin(async (tx) => {
      if (max !== undefined && tenant !== undefined) {
        await holdActiveSessions(tx, tenant, 1, max, run.sessionId);
      }
      // The session row first, the order every writer of a session and its runs uses: a
      // cancel that holds it (batches.ts) commits before the status is read here, so the run
      // re-opens the session it cancelled; a cancel that comes later finds the run and drops
      // it. Without the lock a run inserted while a cancel ran was invisible to the cancel's
      // update and stayed queued on the cancelled session for ever (its worker's claim skips
      // a cancelled session): the send was answered 202 and never ran.
      const [row] = await tx<{ status: string }[]>`
        select status from sessions where id = ${run.sessionId} for no key update`;
      if (!row) throw new NotFoundError(`session ${run.sessionId}`);
      if (options.unpark && (row.status === "parked" || row.status === "cancelled"))
        await this.unparkWith(tx, run.sessionId);
      return this.insertRun(tx, run, attempt);
    });
  }

  private async insertRun(
    sql: postgres.Sql | postgres.TransactionSql,
    run: NewRun,
    attempt: number,
  ): Promise<{ run: RunRow; created: boolean }> {
    const id = randomUUID();
    const inserted = await sql<{ r: string | RawRun }[]>`
      insert into runs (id, session_id, tenant, kind, trigger, input, resume_kind, model, goal, job_id, last_sign_at)
      values (${id}, ${run.sessionId}, (select tenant from sessions where id = ${run.sessionId}), ${run.kind},
              ${run.trigger}, ${run.input ?? null}, ${run.resumeKind ?? null},
              ${run.model ? JSON.stringify(run.model) : null}::jsonb, ${run.goal ? JSON.stringify(run.goal) : null}::jsonb,
              ${QUEUES.runs.jobId({ sessionId: run.sessionId, runId: id })}, ${run.lastSignAt?.toISOString() ?? null})
      on conflict (session_id) where kind = 'resume' and status <> 'ended' do nothing
      returning row_to_json(runs) as r`.catch((error: unknown) => {
      // The session was deleted after the caller found it (DELETE /v1/sessions/:id): its
      // tenant reads as null, or the key finds no row. A 404, like a session never there.
      if (sessionGone(error)) throw new NotFoundError(`session ${run.sessionId}`);
      throw error;
    });
    if (inserted[0]) return { run: runFromRaw(json<RawRun>(inserted[0].r)), created: true };
    const [active] = await sql<{ r: string | RawRun }[]>`
      select row_to_json(r) as r from runs r
       where r.session_id = ${run.sessionId} and r.kind = 'resume' and r.status <> 'ended'`;
    if (active) return { run: runFromRaw(json<RawRun>(active.r)), created: false };
    // The active resume ended between the insert and the read: try again.
    if (attempt < 3) return this.insertRun(sql, run, attempt + 1);
    throw new Error(`could not queue a resume for session ${run.sessionId}`);
  }
}

/** The session list's condition for a state (literal SQL, never a parameter), as counted for batches (batch-store.ts). */
function statusCondition(sql: postgres.Sql, status: ListStatus): postgres.PendingQuery<postgres.Row[]> {
  const noRun = sql`not exists (select 1 from runs r where r.session_id = s.id and r.status <> 'ended')`;
  switch (status) {
    case "parked":
      return sql`s.status = 'parked'`;
    case "cancelled":
      return sql`s.status = 'cancelled'`;
    case "active":
      return sql`s.status = 'active'`;
    case "running":
      // Running, or interrupted and waiting for its automatic resume.
      return sql`s.status = 'active' and (exists (select 1 from runs r where r.session_id = s.id and r.status = 'running')
        or (${noRun} and s.run_started and s.tail_state <> 'completed'))`;
    case "queued":
      return sql`s.status = 'active' and exists (select 1 from runs r where r.session_id = s.id and r.status = 'queued')
        and not exists (select 1 from runs r where r.session_id = s.id and r.status = 'running')`;
    case "completed":
      return sql`s.status = 'active' and ${noRun} and (s.tail_state = 'completed' or not s.run_started)`;
  }
}

/** Postgres refused a run because its session no longer exists (not-null tenant, or the foreign key). */
function sessionGone(error: unknown): boolean {
  const { code, column_name: column } = (error ?? {}) as { code?: unknown; column_name?: unknown };
  return code === "23503" || (code === "23502" && column === "tenant");
}
