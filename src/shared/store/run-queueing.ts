/**
 * Queueing a run: the writes that need no lease, as queued runs do not touch the history (the
 * worker appends their input when it takes them, under its lease). A run someone asked for
 * makes a parked or cancelled session active again.
 */
import { randomUUID } from "node:crypto";
import type postgres from "postgres";
import type { ModelConfig } from "../agent-config.js";
import type { Database } from "../db/client.js";
import type { RunRow } from "../db/schema.js";
import { AgentResumeError, NotFoundError } from "../errors.js";
import { QUEUES } from "../queues.js";
import { NOT_RESUMABLE_REASONS, type NotResumableReason } from "../resume-reasons.js";
import { holdActiveSessions } from "./active-sessions.js";
import type { DroppedRun } from "./batch-cancel.js";
import { checkHistoryRoom } from "./history-room.js";
import { checkQueuedRuns } from "./queued-runs.js";
import { json, type RawRun, runFromRaw } from "./rows.js";

/**
 * Limits checked where runs are queued (contracts §10); none when not given.
 * `maxQueuedRuns`: runs with input one session may have waiting to start (queued-runs.ts).
 */
export type RunLimits = { maxActiveSessions?: number; maxQueuedRuns?: number };

export type NewRun = {
  sessionId: string;
  kind: "run" | "resume";
  trigger: "api" | "sweeper" | "worker";
  input?: string;
  resumeKind?: string;
  model?: ModelConfig;
  /** Goal mode (contracts §8), only for a run with new input. */
  goal?: { text: string; maxRounds: number };
  /** For resumes of an interrupted run: its last sign of life. */
  lastSignAt?: Date;
};

/** How a run is queued: the tenant's limits, and whether it makes the session active again. */
export type QueueRunOptions = RunLimits & {
  /** The caller's tenant: the session's active-session cap is checked for it. */
  tenant?: string;
  /**
   * Someone acted on it (new input, an explicit resume): a parked or cancelled session is
   * made active again in the same transaction, as its status is under the row's lock.
   */
  unpark?: boolean;
  /**
   * An explicit resume (POST /v1/sessions/:id/resume), asked for on the history up to
   * `lastSeq`. Checked under the session's row lock, which every queueing of a run and every
   * append takes, so what changed since the caller read the session is seen here (contracts
   * §12): a queued or running run with input refuses it `running`; a history that has grown
   * since and now ends with nothing to resume refuses it with that reason (its tail state,
   * written with each append). Both throw AgentResumeError. An automatic resume waiting to
   * start (its backoff) on another model than the one this resume names gives way to it
   * (`replaced`).
   */
  explicitResume?: { lastSeq: number };
  /**
   * The most bytes the session's history may hold with this run's input and the inputs still
   * queued (history-room.ts): a message past it is refused `history_full`. None when absent.
   */
  maxHistoryBytes?: number;
};

/**
 * Makes a parked session active again (someone acted on it: new input or an explicit
 * resume); its count of automatic resumes starts over.
 */
export async function unparkSession(
  sql: postgres.Sql | postgres.TransactionSql,
  id: string,
): Promise<boolean> {
  // A cancelled session is re-opened the same way (contracts §9: a new message re-opens it).
  const rows = await sql`
    update sessions set status = 'active', parked_reason = null, resume_attempts = 0,
                        next_resume_at = null, updated_at = now()
     where id = ${id} and status in ('parked', 'cancelled') returning 1`;
  return rows.length > 0;
}

/**
 * Queues a run. A resume joins the session's resume that is already waiting or running
 * (at most one per session, enforced by a unique index), so replays change nothing.
 */
export async function createRun(
  database: Database,
  run: NewRun,
  options: QueueRunOptions = {},
  attempt = 0,
): Promise<{ run: RunRow; created: boolean; replaced?: DroppedRun[] }> {
  const { maxActiveSessions: max, maxQueuedRuns, tenant } = options;
  return database.sql.begin(async (tx) => {
    if (max !== undefined && tenant !== undefined) {
      await holdActiveSessions(tx, tenant, 1, max, run.sessionId);
    }
    // The session row first, the order every writer of a session and its runs uses: a
    // cancel that holds it (batches.ts) commits before the status is read here, so the run
    // re-opens the session it cancelled; a cancel that comes later finds the run and drops
    // it. Without the lock a run inserted while a cancel ran was invisible to the cancel's
    // update and stayed queued on the cancelled session for ever (its worker's claim skips
    // a cancelled session): the send was answered 202 and never ran.
    const [row] = await tx<
      {
        status: string;
        last_seq: number;
        tail_state: string;
        batch_id: string | null;
        history_bytes: string;
        history_bytes_seq: number;
      }[]
    >`
      select status, last_seq, tail_state, batch_id, history_bytes::text, history_bytes_seq
        from sessions where id = ${run.sessionId} for no key update`;
    if (!row) throw new NotFoundError(`session ${run.sessionId}`);
    // A session of a batch being deleted (DELETE /v1/batches/:id marked it, its sessions go
    // chunk by chunk) takes no run: it is gone for the caller, as its batch. Read after the
    // row's lock, in a statement of its own, so a mark that committed meanwhile is seen.
    if (row.batch_id !== null) {
      const [gone] = await tx`select 1 from batches where id = ${row.batch_id} and deleted_at is not null`;
      if (gone) throw new NotFoundError(`session ${run.sessionId}`);
    }
    // Under the row's lock: a concurrent send to this session waits here, then counts ours.
    // Resumes are not bounded here: at most one waits per session (runs_one_active_resume).
    if (maxQueuedRuns !== undefined && run.kind === "run")
      await checkQueuedRuns(tx, run.sessionId, maxQueuedRuns);
    if (options.maxHistoryBytes !== undefined && run.kind === "run" && run.input !== undefined)
      await checkHistoryRoom(tx, run.sessionId, row, run.input, options.maxHistoryBytes);
    const explicit = options.explicitResume && run.kind === "resume";
    if (explicit) await checkExplicitResume(tx, run.sessionId, row, options.explicitResume!);
    if (options.unpark && (row.status === "parked" || row.status === "cancelled"))
      await unparkSession(tx, run.sessionId);
    const replaced = explicit && run.model ? await replaceWaitingAutomatic(tx, run) : [];
    const queued = await insertRun(tx, run, attempt);
    return replaced.length > 0 ? { ...queued, replaced } : queued;
  });
}

/** The error of an automatic resume an explicit one replaced before it started. */
export const REPLACED_RESUME_ERROR = "replaced before it started by a resume asked for with another model";

/**
 * Ends, `cancelled`, the session's automatic resume (the sweeper's or a worker's) that waits to
 * start on another model than the one the explicit resume `run` names: it holds no input, only the point
 * the explicit resume takes up, and it is always there while a provider keeps failing — the
 * very case for a resume on another model (resume-semantics §4), which was refused `running`
 * until the session was parked. A run handed back for capacity (`started_at` set) is a request
 * in progress and is not replaced; a worker that took the job finds the run ended and starts
 * nothing (as after a cancel). One on the same model is joined instead (`insertRun`).
 */
async function replaceWaitingAutomatic(tx: postgres.TransactionSql, run: NewRun): Promise<DroppedRun[]> {
  return tx<DroppedRun[]>`
    update runs r set status = 'ended', ended_reason = 'cancelled', ended_at = now(),
                      error = ${REPLACED_RESUME_ERROR}
     where r.session_id = ${run.sessionId} and r.kind = 'resume' and (r.status = 'queued') is true
       and r.started_at is null and r.trigger in ('sweeper', 'worker')
       and r.model is distinct from ${JSON.stringify(run.model)}::jsonb
    returning r.id, r.session_id as "sessionId", r.kind, false as "handedBack",
              (select s.session_events from sessions s where s.id = r.session_id) as "sessionEvents"`;
}

/** See QueueRunOptions.explicitResume; `session` is the row read under its lock. */
async function checkExplicitResume(
  tx: postgres.TransactionSql,
  sessionId: string,
  session: { last_seq: number; tail_state: string },
  asked: { lastSeq: number },
): Promise<void> {
  const active = await tx`
    select 1 from runs where session_id = ${sessionId} and kind = 'run' and status <> 'ended' limit 1`;
  if (active.length > 0) throw new AgentResumeError("running", "a run of this session is queued or running");
  const tail = session.tail_state;
  if (session.last_seq !== asked.lastSeq && (NOT_RESUMABLE_REASONS as readonly string[]).includes(tail))
    throw new AgentResumeError(
      tail as NotResumableReason,
      "the session's history changed while the resume was asked for",
    );
}

async function insertRun(
  sql: postgres.Sql | postgres.TransactionSql,
  run: NewRun,
  attempt: number,
): Promise<{ run: RunRow; created: boolean }> {
  const id = randomUUID();
  const inserted = await sql<{ r: string | RawRun }[]>`
    insert into runs (id, session_id, tenant, batch_id, kind, trigger, input, resume_kind, model, goal, job_id, last_sign_at)
    values (${id}, ${run.sessionId}, (select tenant from sessions where id = ${run.sessionId}),
            (select batch_id from sessions where id = ${run.sessionId}), ${run.kind},
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
  if (attempt < 3) return insertRun(sql, run, attempt + 1);
  throw new Error(`could not queue a resume for session ${run.sessionId}`);
}

/** Postgres refused a run because its session no longer exists (not-null tenant, or the foreign key). */
function sessionGone(error: unknown): boolean {
  const { code, column_name: column } = (error ?? {}) as { code?: unknown; column_name?: unknown };
  return code === "23503" || (code === "23502" && column === "tenant");
}
