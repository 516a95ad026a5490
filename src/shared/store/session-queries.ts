/**
 * Sessions and runs as every role reads them, and the writes that need no lease, each in its
 * module: creating sessions (session-creation.ts), the session list (session-list.ts),
 * queueing runs (run-queueing.ts). Queued runs do not touch the history, so they never race a
 * worker; the worker appends their input when it takes them, under its lease.
 */
import type { Database } from "../db/client.js";
import type { RunRow, SessionRow } from "../db/schema.js";
import type { Message, StoredMessage } from "../messages.js";
import type { UsageTotals } from "../prices.js";
import type { ResumePoint, ResumePointJson } from "../resume-point.js";
import { hasQueuedRuns } from "./active-sessions.js";
import type { DroppedRun } from "./batch-cancel.js";
import { notInDeletedBatch } from "./deleted-batches.js";
import { bytesAfter } from "./history-bytes.js";
import { readHistory, readHistoryPage } from "./history-reads.js";
import { appendImportedPage } from "./imported-pages.js";
import { historyPoint, sessionResumePoint } from "./resume-points.js";
import { json, type RawRun, type RawSession, runFromRaw, sessionFromRaw } from "./rows.js";
import {
  createRun,
  type NewRun,
  type QueueRunOptions,
  type RunLimits,
  unparkSession,
} from "./run-queueing.js";
import { type BatchTarget, createSessions, type NewSession } from "./session-creation.js";
import {
  type ListCursor,
  type ListedSession,
  listSessionPage,
  listSessions,
  type SessionListFilter,
  type SessionListPage,
} from "./session-list.js";
import { usageOfSession } from "./session-usage.js";
import { parkedReasonOf, startWaitingInput } from "./waiting-input.js";

export type { NewRun, QueueRunOptions, RunLimits } from "./run-queueing.js";
export type { BatchTarget, NewSession } from "./session-creation.js";
export type {
  ListCursor,
  ListedSession,
  ListStatus,
  SessionListFilter,
  SessionListPage,
} from "./session-list.js";

export class SessionQueries {
  constructor(private readonly database: Database) {}

  /** Creates a session; an imported history is stored as it is (validated by the caller). */
  async createSession(input: NewSession): Promise<{ id: string }> {
    const [created] = await this.createSessions([input]);
    return { id: created!.id };
  }

  /** Creates sessions, with their first runs, all or none (session-creation.ts). */
  createSessions(
    inputs: readonly NewSession[],
    limits: RunLimits = {},
    batch?: BatchTarget,
  ): Promise<{ id: string; runId: string | null }[]> {
    return createSessions(this.database, inputs, limits, batch);
  }

  /** A page of the session list, newest activity first (session-list.ts). */
  listSessions(filter: SessionListFilter): Promise<ListedSession[]> {
    return listSessions(this.database, filter);
  }

  /** The same page, bounded by `filter.maxBytes` too, and whether the bound stopped it. */
  listSessionPage(filter: SessionListFilter): Promise<SessionListPage> {
    return listSessionPage(this.database, filter);
  }

  /** Makes a parked or cancelled session active again (run-queueing.ts). */
  async unpark(id: string): Promise<boolean> {
    return unparkSession(this.database.sql, id);
  }

  // The reads below run on every job and every poll: plain postgres.js statements, which it
  // prepares once per connection (drizzle's builder sends each query unprepared). `tenant`:
  // the API passes the caller's, so another tenant's row reads as missing; the worker, the
  // sweeper and the operator's CLI pass none (any tenant).

  /**
   * ` and ALIAS.tenant = $n` and not of a batch marked deleted (deleted-batches.ts), or nothing
   * when no tenant is given.
   */
  private ofTenant(alias: "s" | "r", tenant: string | undefined) {
    const { sql } = this.database;
    return tenant === undefined
      ? sql``
      : sql`and ${sql(alias)}.tenant = ${tenant} and ${notInDeletedBatch(sql, alias)}`;
  }

  async getSession(id: string, tenant?: string): Promise<SessionRow | undefined> {
    const [row] = await this.database.sql<{ s: string | RawSession }[]>`
      select row_to_json(s) as s from sessions s where s.id = ${id} ${this.ofTenant("s", tenant)}`;
    return row ? sessionFromRaw(json<RawSession>(row.s)) : undefined;
  }

  /**
   * The bytes an unpaged read of `session`'s messages after `afterSeq` answers, exact from
   * `enough` on (history-bytes.ts `bytesAfter`): a big answer waits for its place by this.
   */
  answerBytes(session: SessionRow, afterSeq: number, enough: number): Promise<number> {
    return bytesAfter(
      this.database.sql,
      session.id,
      {
        history_bytes: session.historyBytes,
        history_bytes_seq: session.historyBytesSeq,
        last_seq: session.lastSeq,
      },
      afterSeq,
      enough,
    );
  }

  /** The stored messages, in seq order; `afterSeq`: only those after it; `limit`: at most that many. */
  async loadHistory(sessionId: string, afterSeq = 0, limit?: number): Promise<StoredMessage[]> {
    return readHistory(this.database.sql, sessionId, afterSeq, limit);
  }

  /** A page of the messages after `afterSeq`: at most `limit`, within about `maxBytes` (history-reads.ts). */
  loadHistoryPage(sessionId: string, afterSeq: number, limit: number, maxBytes: number) {
    return readHistoryPage(this.database.sql, sessionId, afterSeq, limit, maxBytes);
  }

  /** The session's resume point (contracts §2): `sessionResumePoint` (resume-points.ts). */
  resumePoint(sessionId: string, tenant?: string): Promise<ResumePointJson> {
    return sessionResumePoint(this.database.sql, sessionId, tenant);
  }

  /** `historyPoint` (resume-points.ts): the stored history's resume point and highest seq. */
  historyPoint(sessionId: string): Promise<{ point: ResumePoint; lastSeq: number }> {
    return historyPoint(this.database.sql, sessionId);
  }

  /** Continues an imported history with a page (imported-pages.ts), to at most `maxHistoryBytes`. */
  appendImported(
    tenant: string,
    sessionId: string,
    afterSeq: number,
    page: readonly Message[],
    maxHistoryBytes: number,
  ) {
    return appendImportedPage(this.database, tenant, sessionId, afterSeq, page, maxHistoryBytes);
  }

  /** The session's usage totals (with `unknownSteps`), without reading the messages themselves. */
  usageTotals(sessionId: string): Promise<UsageTotals> {
    return usageOfSession(this.database, sessionId);
  }

  /** The session's runs in the order they run (schema.ts `queueSeq`): the last is the latest. */
  async listRuns(sessionId: string, tenant?: string): Promise<RunRow[]> {
    const rows = await this.database.sql<{ r: string | RawRun }[]>`
      select row_to_json(r) as r from runs r where r.session_id = ${sessionId} ${this.ofTenant("r", tenant)}
       order by r.queue_seq, r.created_at, r.id`;
    return rows.map((row) => runFromRaw(json<RawRun>(row.r)));
  }

  /**
   * The session's latest run in the order runs run (as `listRuns`'s last), among those with
   * `only.id` or in `only.status` when given; undefined: none. One index look-up on
   * runs_session_idx (runs_session_state_idx for a status), however many runs the session has.
   */
  async lastRun(
    sessionId: string,
    tenant: string | undefined,
    only: { id?: string; status?: RunRow["status"] } = {},
  ): Promise<RunRow | undefined> {
    const { sql } = this.database;
    const [row] = await sql<{ r: string | RawRun }[]>`
      select row_to_json(r) as r from runs r where r.session_id = ${sessionId} ${this.ofTenant("r", tenant)}
             ${only.id === undefined ? sql`` : sql`and r.id = ${only.id}`}
             ${only.status === undefined ? sql`` : sql`and r.status = ${only.status}`}
       order by r.queue_seq desc, r.created_at desc, r.id desc limit 1`;
    return row ? runFromRaw(json<RawRun>(row.r)) : undefined;
  }

  /**
   * The latest `limit` runs of a session before `before` (all when absent), in the order
   * they run (as `listRuns`), each with its place (`cursor`) for the next page: keyset paging
   * on (queue_seq, created_at, id), on runs_session_idx. The cursor names its run by id (its
   * `micros` is its `created_at`, as before); the run's place is read from its row.
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
                 : sql`and (r.queue_seq, r.created_at, r.id)
                           < ((select c.queue_seq from runs c where c.id = ${before.id} and c.session_id = ${sessionId}),
                              (select c.created_at from runs c where c.id = ${before.id}), ${before.id})`
             }
       order by r.queue_seq desc, r.created_at desc, r.id desc limit ${page.limit}`;
    return rows.reverse().map((row) => {
      const run = runFromRaw(json<RawRun>(row.r));
      return { ...run, cursor: { micros: row.micros, id: run.id } };
    });
  }

  /**
   * The session's runs that have not ended (queued or running), in the order they run: read
   * on runs_session_state_idx, without the ended ones however many there are.
   */
  async unfinishedRuns(sessionId: string, tenant?: string): Promise<RunRow[]> {
    const rows = await this.database.sql<{ r: string | RawRun }[]>`
      select row_to_json(r) as r from runs r
       where r.session_id = ${sessionId} and r.status in ('queued', 'running') ${this.ofTenant("r", tenant)}
       order by r.queue_seq, r.created_at, r.id`;
    return rows.map((row) => runFromRaw(json<RawRun>(row.r)));
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
   * The next queued run of a session: runs are taken in the order they were queued, under the
   * session's row lock (schema.ts `queueSeq`), not by `created_at`.
   * `(select 'queued'::text)`: on runs_session_state_idx even right after a batch (grouped-claims.ts).
   */
  async nextQueuedRun(sessionId: string): Promise<RunRow | undefined> {
    const [row] = await this.database.sql<{ r: string | RawRun }[]>`
      select row_to_json(r) as r from runs r where r.session_id = ${sessionId} and r.status = (select 'queued'::text)
       order by r.queue_seq limit 1`;
    return row ? runFromRaw(json<RawRun>(row.r)) : undefined;
  }

  /**
   * The models the session's started runs were asked to run on (`runs.model`: a resume's, a
   * fallback's), as stored, each once: what its unreported tokens may have cost (loop-budget.ts).
   */
  async runModels(sessionId: string): Promise<unknown[]> {
    const rows = await this.database.sql<{ model: unknown }[]>`
      select distinct model from runs where session_id = ${sessionId} and model is not null and started_at is not null`;
    return rows.map((row) => json<unknown>(row.model));
  }

  /**
   * Whether the batch was cancelled, or deleted (marked, or its row gone): its runs' jobs go
   * (cancel-cleanup.ts `dropJobsOfCancelled`).
   */
  async batchCancelled(batchId: string): Promise<boolean> {
    const rows = await this.database
      .sql`select 1 from batches where id = ${batchId} and cancelled_at is null and deleted_at is null`;
    return rows.length === 0;
  }

  /** Whether the tenant has a run waiting to start. */
  tenantHasQueuedRuns(tenant: string): Promise<boolean> {
    return hasQueuedRuns(this.database.sql, tenant);
  }

  /** Queues a run; a resume joins the one already waiting or running (run-queueing.ts). */
  createRun(
    run: NewRun,
    options: QueueRunOptions = {},
    attempt = 0,
  ): Promise<{ run: RunRow; created: boolean; replaced?: DroppedRun[] }> {
    return createRun(this.database, run, options, attempt);
  }

  /** Why a queued run of this session waits: its parked reason while it is parked, else null (waiting-input.ts). */
  parkedReasonOf(sessionId: string): Promise<string | null> {
    return parkedReasonOf(this.database.sql, sessionId);
  }

  /** An explicit resume of a parked session on which a message waits starts it (waiting-input.ts). */
  startWaitingInput(
    sessionId: string,
    options: Parameters<typeof startWaitingInput>[2],
  ): Promise<RunRow | null> {
    return startWaitingInput(this.database, sessionId, options);
  }
}
