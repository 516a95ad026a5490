/**
 * Deleting sessions and batches (`DELETE /v1/sessions/:id`, `DELETE /v1/batches/:id`) and
 * retention (FLEET_RETENTION_DAYS). Every statement deletes a bounded number of sessions:
 * a session's messages and runs go with it (ON DELETE CASCADE), so one statement's work is
 * bounded by its sessions' histories, never by the fleet's size.
 *
 * A worker acting on a deleted session learns it from its next write: every write is fenced
 * on the session row (fenced-writes.ts), which no longer exists, so the write changes
 * nothing and throws a FencedError; the job ends `fenced`, nothing is resumed or parked.
 * Rows another transaction holds (a worker's claim, another sweeper's chunk) are skipped
 * (`skip locked`) by the chunked deletes and taken in a later chunk.
 *
 * Every delete also writes, in its own statement, a row per deleted session to
 * `session_deletions`: the extensions' `onSessionDeleted` hooks owed, which workers call
 * (worker/deletion-hooks.ts) and then remove the row.
 */
import type postgres from "postgres";
import type { Database } from "../db/client.js";
import { markExpiredBatches } from "./batch-expiry.js";
import { notInDeletedBatch } from "./deleted-batches.js";
import { json } from "./rows.js";

/**
 * A run that had not ended when its session was deleted: its job is removed, a worker told,
 * and its tenant's request waiting for endpoint capacity, if any, forgotten.
 */
export type DroppedRun = { id: string; sessionId: string; tenant: string; kind: string; status: string };

/** A deleted session whose extensions' `onSessionDeleted` hooks are owed. */
export type OwedDeletion = { sessionId: string; tenant: string; deletedAt: Date; attempts: number };

/** What one delete removed. */
export type Deleted = { sessionIds: string[]; runs: DroppedRun[] };

type DeletedRow = { sessions: string[] | string; runs: DroppedRun[] | string };

/**
 * A delete's CTE keeping the runs it found running (`r`) of the sessions it deleted (`d`):
 * their rows go with the session, and the sweeper sends their stop again while Redis lost it
 * (sweeper/deleted-runs.ts). Only a delete of sessions with a run running writes a row.
 */
const keepRunning = (tx: postgres.TransactionSql) => tx`
  insert into deleted_runs (run_id, session_id)
  select id, session_id from r where status = 'running' and session_id in (select id from d)
  on conflict do nothing`;

function deletedFrom(row: DeletedRow | undefined): Deleted {
  return {
    sessionIds: row ? json<string[]>(row.sessions) : [],
    runs: row ? json<DroppedRun[]>(row.runs) : [],
  };
}

export class DataDeletion {
  constructor(private readonly database: Database) {}

  /**
   * Deletes one session of `tenant` with its messages and runs, whatever its state. Returns
   * null when there is no such session of that tenant (404).
   */
  async deleteSession(tenant: string, id: string): Promise<Deleted | null> {
    // The row is locked first, in a statement of its own, so that the delete reads the
    // session's runs after any writer holding the row (a worker's startRun marking its run
    // running, a send queueing one) has committed. In one statement the runs were read from
    // the snapshot taken before the delete waited for the row: a run started meanwhile was
    // reported `queued`, so the worker running it was not told to stop.
    return this.database.sql.begin(async (tx) => {
      // A session of a batch marked deleted is gone for its tenant already (deleted-batches.ts):
      // the batch's purge deletes it.
      const [held] = await tx`select s.id from sessions s where s.id = ${id} and s.tenant = ${tenant}
                                 and ${notInDeletedBatch(tx, "s")} for update of s`;
      if (!held) return null;
      const [row] = await tx<DeletedRow[]>`
        with d as (
          delete from sessions where id = ${id} and tenant = ${tenant} returning id, tenant
        ), o as (
          insert into session_deletions (session_id, tenant) select id, tenant from d on conflict do nothing
        ), r as (
          select r.id, r.session_id, r.tenant, r.kind, r.status from runs r
           where r.session_id = ${id} and r.status <> 'ended' and exists (select 1 from d)
        ), k as (${keepRunning(tx)})
        select (select coalesce(json_agg(id), '[]'::json) from d) as sessions,
               (select coalesce(json_agg(json_build_object('id', id, 'sessionId', session_id, 'tenant', tenant, 'kind', kind,
                                                           'status', status)), '[]'::json) from r) as runs`;
      const deleted = deletedFrom(row);
      return deleted.sessionIds.length === 0 ? null : deleted;
    });
  }

  /**
   * Marks a batch of `tenant` deleted: from now on it answers 404, takes no session and owes
   * no webhook. Null when there is no such batch (or it is already being deleted), else the
   * queued runs it ended, whose jobs the caller removes, and its runs still running (status
   * `running`), whose workers the caller tells at once, as a cancel does: their sessions are
   * cancelled, but a tool in progress would otherwise run to its end, or until its session's
   * chunk is purged (the sweeper's, when the API stops or runs out of time).
   *
   * In the same transaction its sessions still active are cancelled and their queued runs
   * ended, as a cancel of the batch does: its sessions are deleted chunk by chunk after this
   * (by the sweeper when the API stops or runs out of time), and until then a worker started
   * their queued runs and ran their tools, and a sweeper resumed them. A send to one of them
   * is refused (run-queueing.ts reads the mark under the session's lock); one that had the
   * lock first has its run ended here (the sessions are locked in a statement of their own,
   * so the update after reads what it committed). Its runs running are recorded as a cancel's
   * are (`cancelled_runs`): the sweeper sends a lost signal again until the purge (`deleted_runs`
   * then); unrecorded, their tools ran on until it (test/batch-delete-lost-stop.test.ts).
   */
  async markBatchDeleted(tenant: string, id: string): Promise<DroppedRun[] | null> {
    return this.database.sql.begin(async (tx) => {
      const rows = await tx`
        update batches set deleted_at = now(), open = false
         where id = ${id} and tenant = ${tenant} and deleted_at is null
        returning id`;
      if (rows.length === 0) return null;
      await tx`select s.id from sessions s where s.batch_id = ${id} and s.status = 'active'
                 order by s.id for no key update of s`;
      const dropped = await tx<DroppedRun[]>`
        with c as (
          update sessions s set status = 'cancelled', cancelled_at = now(), next_resume_at = null,
                                updated_at = now(),
                                cancelled_runs = (select array_agg(r.id) from runs r
                                                   where r.session_id = s.id and r.status = 'running')
           where s.batch_id = ${id} and s.status = 'active'
        )
        update runs r set status = 'ended', ended_reason = 'cancelled', ended_at = now(),
                          error = 'batch deleted'
         where r.session_id in (select s.id from sessions s where s.batch_id = ${id})
           and r.status = 'queued'
        returning r.id, r.session_id as "sessionId", r.tenant, r.kind, 'queued' as status`;
      const running = await tx<DroppedRun[]>`
        select r.id, r.session_id as "sessionId", r.tenant, r.kind, r.status from runs r
         where r.batch_id = ${id} and r.status = 'running'`;
      return [...dropped, ...running];
    });
  }

  /**
   * Deletes up to `limit` sessions of a batch marked deleted; when none is left, the batch's
   * row too. `done`: the batch is gone. Sessions another transaction holds wait for a later call.
   */
  async purgeBatchChunk(batchId: string, limit: number): Promise<Deleted & { done: boolean }> {
    // The rows are locked first, then deleted by a statement whose snapshot is taken after
    // the locks (as deleteSession, expireSessions): in one statement a run a worker started
    // (or a send queued) and committed while the chunk ran was read from the older snapshot,
    // reported `queued` or not at all, and its worker was not told to stop.
    const row = await this.database.sql.begin(async (tx) => {
      const doomed = await tx<{ id: string }[]>`
        select s.id from sessions s
         where s.batch_id = ${batchId}
           and exists (select 1 from batches b where b.id = ${batchId} and b.deleted_at is not null)
         order by s.id limit ${limit}
           for update of s skip locked`;
      const ids = doomed.map((d) => d.id);
      const [found] = await tx<(DeletedRow & { left: boolean })[]>`
        with r as (
          select r.id, r.session_id, r.tenant, r.kind, r.status from runs r
           where r.session_id in ${tx(ids.length > 0 ? ids : [""])} and r.status <> 'ended'
        ), d as (
          delete from sessions s where s.id in ${tx(ids.length > 0 ? ids : [""])} returning s.id, s.tenant
        ), o as (
          insert into session_deletions (session_id, tenant) select id, tenant from d on conflict do nothing
        ), k as (${keepRunning(tx)})
        select (select coalesce(json_agg(id), '[]'::json) from d) as sessions,
               (select coalesce(json_agg(json_build_object('id', id, 'sessionId', session_id, 'tenant', tenant, 'kind', kind,
                                                           'status', status)), '[]'::json) from r) as runs,
               exists (select 1 from sessions s where s.batch_id = ${batchId}
                        and s.id not in (select id from d)) as "left"`;
      return found;
    });
    const deleted = deletedFrom(row);
    if (row?.left || deleted.sessionIds.length === limit) return { ...deleted, done: false };
    // No session left (none can be added: a deleted batch takes none): the row goes.
    await this.database.sql`
      delete from batches b where b.id = ${batchId} and b.deleted_at is not null
         and not exists (select 1 from sessions s where s.batch_id = b.id)`;
    const [still] = await this.database.sql`select 1 from batches where id = ${batchId}`;
    return { ...deleted, done: still === undefined };
  }

  /**
   * Takes up to `limit` deleted sessions whose `onSessionDeleted` hooks are owed (the outbox
   * every delete above writes to), for `claimMs`: another worker takes them again after that
   * (this one died). `attempts` counts the takes, this one included.
   */
  async claimDeletions(limit: number, claimMs: number): Promise<OwedDeletion[]> {
    const rows = await this.database.sql<
      { session_id: string; tenant: string; deleted_at: Date; attempts: number }[]
    >`
      update session_deletions o
         set claimed_until = now() + ${claimMs} * interval '1 millisecond', attempts = o.attempts + 1
        from (select session_id from session_deletions where claimed_until <= now()
               order by claimed_until limit ${limit} for update skip locked) c
       where o.session_id = c.session_id
      returning o.session_id, o.tenant, o.deleted_at, o.attempts`;
    return rows.map((r) => ({
      sessionId: r.session_id,
      tenant: r.tenant,
      deletedAt: new Date(r.deleted_at),
      attempts: r.attempts,
    }));
  }

  /**
   * Removes up to `limit` owed deletions no worker took for `olderThanMs` (no worker of the
   * fleet has the hook: the table would otherwise grow with every delete); returns how many.
   */
  async dropUntakenDeletions(olderThanMs: number, limit: number): Promise<number> {
    const rows = await this.database.sql`
      delete from session_deletions where session_id in (
        select session_id from session_deletions
         where claimed_until < now() - ${olderThanMs} * interval '1 millisecond' and attempts = 0
         limit ${limit})
      returning 1`;
    return rows.length;
  }

  /** The hooks of these deleted sessions were called: they are owed no more. */
  async forgetDeletions(sessionIds: readonly string[]): Promise<void> {
    if (sessionIds.length === 0) return;
    const { sql } = this.database;
    await sql`delete from session_deletions where session_id in ${sql([...sessionIds])}`;
  }

  /** Which of `ids` are sessions that exist (one query; for a worker's transcript pass). */
  async existingSessions(ids: readonly string[]): Promise<Set<string>> {
    if (ids.length === 0) return new Set();
    const { sql } = this.database;
    const rows = await sql<{ id: string }[]>`select id from sessions where id in ${sql([...ids])}`;
    return new Set(rows.map((r) => r.id));
  }

  /** Batches marked deleted `markedMsAgo` ago or more, not all gone (deleted-batches.ts says why). */
  async unfinishedBatchDeletes(limit: number, markedMsAgo = 0): Promise<string[]> {
    const rows = await this.database.sql<{ id: string }[]>`
      select id from batches
       where deleted_at is not null and deleted_at <= now() - ${markedMsAgo} * interval '1 millisecond'
       order by deleted_at limit ${limit}`;
    return rows.map((r) => r.id);
  }

  /**
   * Retention: deletes up to `limit` sessions outside batches (a batch's go with it) last active (a run started or ended, created,
   * parked, cancelled) more than `maxIdleMs` ago (Postgres's clock) that nothing will act on by itself — parked,
   * cancelled, completed, empty, or an imported history never run — and that have no run
   * queued or running (a message waiting on a parked session, waiting-input.ts, is no one's
   * work until someone acts: its session goes as any parked one). Conditions are checked again on each row as it is locked. The run
   * check is written `(…) is true` so that no partial index of `runs` serves it: each
   * candidate's runs are looked up by session (schema.ts says why), not every unfinished run
   * of the fleet read per pass.
   */
  async expireSessions(maxIdleMs: number, limit: number): Promise<Deleted> {
    // Two statements: the rows are locked first, then deleted by a statement whose snapshot
    // is taken after the locks. In one statement the run check read the snapshot taken
    // before the row's lock: a new message whose run was queued (under the row's lock,
    // run-queueing.ts) and committed while the statement ran was invisible to it, and the
    // session was deleted with the run the API had just accepted. Now such a run is seen
    // and its session kept; none can be queued after the lock (it waits for the row).
    return this.database.sql.begin(async (tx) => {
      const doomed = await tx<{ id: string }[]>`
        select s.id from sessions s
         where s.updated_at < now() - ${maxIdleMs} * interval '1 millisecond' and s.batch_id is null
           and not (s.status = 'active' and s.run_started and s.tail_phase = 'open')
           and not exists (select 1 from runs r where r.session_id = s.id and (r.status <> 'ended') is true
                             and not (s.status = 'parked' and r.status = 'queued'))
         order by s.updated_at, s.id limit ${limit}
           for update of s skip locked`;
      if (doomed.length === 0) return { sessionIds: [], runs: [] };
      const [row] = await tx<DeletedRow[]>`
        with d as (
          delete from sessions s where s.id in ${tx(doomed.map((r) => r.id))}
             and not exists (select 1 from runs r where r.session_id = s.id and (r.status <> 'ended') is true
                               and not (s.status = 'parked' and r.status = 'queued'))
          returning s.id, s.tenant
        ), o as (
          insert into session_deletions (session_id, tenant) select id, tenant from d on conflict do nothing
        )
        select (select coalesce(json_agg(id), '[]'::json) from d) as sessions, '[]'::json as runs`;
      return deletedFrom(row);
    });
  }

  /** Retention: marks deleted up to `limit` batches idle `maxIdleMs` past their end (batch-expiry.ts). */
  expireBatches(maxIdleMs: number, limit: number): Promise<string[]> {
    return markExpiredBatches(this.database, maxIdleMs, limit);
  }
}
