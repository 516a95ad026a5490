/** The sweeper's SQL. Each scan uses a partial index, so its cost follows sessions in flight or stuck. */
// Dates go in as ISO strings: drizzle's postgres.js driver replaces the date serializers.
import type { Database } from "../shared/db/client.js";
import { endsCancelled } from "../shared/store/cancel-reads.js";
import { json } from "../shared/store/rows.js";

/** How the sweeper ends a run whose worker is gone (`endAbandonedRun`). */
export type AbandonedRunEnd = "crashed" | "stalled" | "cancelled";

export type RunningRun = {
  id: string;
  session_id: string;
  kind: string;
  worker_id: string | null;
  started_at: Date;
  /** How long it has been running, on Postgres's clock (as `started_at`), not the sweeper host's. */
  age_ms: number;
  /**
   * How long since it last made progress, on Postgres's clock: since its session's last
   * append or claim (`last_active_at`), or its start when later. Lease renewals are not
   * progress: a worker stuck in a tool renews its lease and appends nothing.
   */
  progress_age_ms: number;
};
export type AttentionSession = { id: string; tail_state: string; resume_attempts: number };
export type LeftoverRun = { id: string; session_id: string; kind: string };
/** A run a cancel found running; `cancelled_at` as Postgres prints it (microseconds kept: where a page starts). */
export type CancelledRunning = { id: string; session_id: string; cancelled_at: string };
export type QueuedRun = {
  id: string;
  session_id: string;
  kind: string;
  job_id: string | null;
  /** As Postgres prints it (microseconds kept): where the next page of a scan starts. */
  created_at: string;
};

/**
 * Run states checked per session or per id are written `(…) is true`, which no index serves, so
 * right after a big batch (statistics that say no run is queued) Postgres still reaches the
 * runs by session or id instead of reading every unfinished run once per row
 * (grouped-claims.ts; test/plans-under-backlog.test.ts: the attention scan read 2,000,000).
 */
export class SweepQueries {
  constructor(private readonly database: Database) {}

  /**
   * Runs some worker is (or was) acting on. Read only when the first of them in
   * runs_unfinished_idx's order is there: see `FIRST_RUNNING`. Each run's session is read by
   * its key (a scalar subquery: one sessions_pkey entry per running run, whatever the plan).
   */
  async runningRuns(): Promise<RunningRun[]> {
    // JIT off: ~9 of planner cost a running run, so past ~11,000 of them Postgres compiled the
    // scan with LLVM at every tick (20,000: 208 ms of JIT in 666 ms; test/sweep-scans-jit.test.ts).
    const [, rows] = await this.database.sql.begin((tx) => [
      tx`set local jit = off`,
      tx<(Omit<RunningRun, "started_at"> & { started_at: string })[]>`
      select id, session_id, kind, worker_id, started_at,
             (extract(epoch from now() - started_at) * 1000)::float8 as age_ms,
             (extract(epoch from now() - greatest(started_at,
                (select s.last_active_at from sessions s where s.id = runs.session_id))) * 1000)::float8
               as progress_age_ms
        from runs where status = 'running'
         and (${tx.unsafe(FIRST_RUNNING)}) is not null`,
    ]);
    // Drizzle's postgres.js driver hands timestamps back as strings.
    return rows.map((r) => ({ ...r, started_at: new Date(r.started_at) }));
  }

  /**
   * Active sessions whose history does not end in a completed answer, with nothing queued
   * or running: each needs a resume or a parking. One still in its backoff gets its resume
   * now, queued with the rest of the backoff as its delay (as a worker's request does), so it
   * stays one of its tenant's active sessions (FLEET_TENANT_MAX_ACTIVE_SESSIONS) meanwhile.
   */
  sessionsNeedingAttention(limit: number): Promise<AttentionSession[]> {
    return this.database.sql<AttentionSession[]>`
      select s.id, s.tail_state, s.resume_attempts from sessions s
       where s.status = 'active' and s.run_started and s.tail_phase = 'open'
         and not exists (select 1 from runs r where r.session_id = s.id and (r.status <> 'ended') is true)
       order by s.next_resume_at nulls first
       limit ${limit}`;
  }

  /**
   * Queued runs of active sessions older than `ms` (their job may have been lost with Redis,
   * or failed), among one page of the queued runs older than `ms` (oldest first, after
   * `after`, the last of the previous page: at most `limit` read); and where the next page
   * starts (undefined: from the start). See `pageOfQueuedRuns` for how the page's sessions
   * are read.
   */
  async queuedRunsOlderThan(
    ms: number,
    limit: number,
    after?: QueuedRun,
  ): Promise<{ runs: QueuedRun[]; next?: QueuedRun }> {
    const page = pageOfQueuedRuns(ms, limit, after);
    const [row] = await this.database.sql.unsafe<
      { runs: string | QueuedRun[] | null; last: string | QueuedRun | null; read: number }[]
    >(
      `
      with ${page.text}, active as materialized (
        select p.id from page p join sessions s on s.id = p.session_id
         where s.status = 'active' and exists (select 1 from page)
      )
      select (select json_agg(json_build_object('id', p.id, 'session_id', p.session_id, 'kind', p.kind,
                                                'job_id', p.job_id, 'created_at', p.created_at::text)
                              order by p.created_at, p.id)
                from page p where p.id in (select a.id from active a)) as runs,
             (select count(*)::int from page) as read,
             (select json_build_object('id', p.id, 'session_id', p.session_id, 'kind', p.kind,
                                       'job_id', p.job_id, 'created_at', p.created_at::text)
                from page p order by p.created_at desc, p.id desc limit 1) as last`,
      page.params,
    );
    const runs = row?.runs ? json<QueuedRun[]>(row.runs) : [];
    const last = row?.last ? json<QueuedRun>(row.last) : undefined;
    return { runs, ...(row && row.read >= limit && last ? { next: last } : {}) };
  }

  /**
   * Ends queued runs left on cancelled sessions, as the cancel would have ended them, among
   * one page of the queued runs older than `ms` (oldest first, after `after`: at most `limit`
   * read, whatever a backlog holds). A cancel ends its sessions' queued runs, and a run
   * queued after it re-opens its session (run-queueing.ts `createRun`), so such a run is a
   * leftover — of a message that raced a cancel before both took the session's row first —
   * that no worker would run (a worker skips a cancelled session) and nothing would end.
   * Returns the runs it ended, and where the next page starts (undefined: from the start).
   * See `pageOfQueuedRuns` for how the page's sessions and runs are read; the update runs
   * only when the page has a cancelled session (a run of the sweeper every second after a
   * batch of 10,000 read the whole of `runs` each time: test/plans-after-batch.test.ts).
   */
  async endCancelledLeftovers(
    ms: number,
    limit: number,
    after?: QueuedRun,
  ): Promise<{ ended: LeftoverRun[]; next?: QueuedRun }> {
    const page = pageOfQueuedRuns(ms, limit, after);
    const [row] = await this.database.sql.unsafe<
      { ended: string | LeftoverRun[] | null; last: string | QueuedRun | null; read: number }[]
    >(
      `
      with ${page.text}, cancelled as materialized (
        select p.id from page p join sessions s on s.id = p.session_id
         where s.status = 'cancelled' and exists (select 1 from page)
      ), e as (
        update runs r set status = 'ended', ended_reason = 'cancelled', ended_at = now(),
                          error = 'cancelled by request'
          from cancelled c
         where r.id = c.id and (r.status = 'queued') is true and exists (select 1 from cancelled)
        returning r.id, r.session_id, r.kind
      )
      select (select json_agg(e) from e) as ended, (select count(*)::int from page) as read,
             (select json_build_object('id', p.id, 'session_id', p.session_id, 'kind', p.kind,
                                       'job_id', p.job_id, 'created_at', p.created_at::text)
                from page p order by p.created_at desc, p.id desc limit 1) as last`,
      page.params,
    );
    const ended = row?.ended ? json<LeftoverRun[]>(row.ended) : [];
    const last = row?.last ? json<QueuedRun>(row.last) : undefined;
    return { ended, ...(row && row.read >= limit && last ? { next: last } : {}) };
  }

  /**
   * Runs a cancel found running (`sessions.cancelled_runs`, batch-cancel.ts) that still run
   * `ms` after it (Postgres's clock): their signal to the workers was lost
   * (cancelled-leftovers.ts). One page of at most `limit`, in the order of their cancel then
   * their id, after `after` (the last of the previous page), and where the next page starts
   * (undefined: from the start). One page read again and again left the runs past it — a
   * cancel of a batch of thousands — without their second signal. Read through the index of
   * unfinished runs: as many as run now.
   */
  async cancelledStillRunning(
    ms: number,
    limit: number,
    after?: CancelledRunning,
  ): Promise<{ runs: CancelledRunning[]; next?: CancelledRunning }> {
    const { sql } = this.database;
    const from = after
      ? sql`and (s.cancelled_at, r.id) > (${after.cancelled_at}::timestamptz, ${after.id})`
      : sql``;
    const runs = await sql<CancelledRunning[]>`
      select r.id, r.session_id, s.cancelled_at::text as cancelled_at
        from runs r join sessions s on s.id = r.session_id
       where r.status = 'running' and r.id = any(s.cancelled_runs)
         and s.cancelled_at < now() - make_interval(secs => ${ms / 1000}) ${from}
       order by s.cancelled_at, r.id limit ${limit}`;
    return { runs, ...(runs.length >= limit ? { next: runs.at(-1) } : {}) };
  }

  /** Which of these runs are still queued (the rest started since they were read). */
  async stillQueued(runIds: readonly string[]): Promise<string[]> {
    if (runIds.length === 0) return [];
    const rows = await this.database.sql<{ id: string }[]>`
      select id from runs where id in ${this.database.sql(runIds)} and (status = 'queued') is true`;
    return rows.map((row) => row.id);
  }

  hasActiveRun(sessionId: string): Promise<boolean> {
    return this.database
      .sql`select 1 from runs where session_id = ${sessionId} and (status <> 'ended') is true limit 1`.then(
      (rows) => rows.length > 0,
    );
  }

  /**
   * Ends a run whose worker is gone and fences that worker, in one statement: the session's
   * `lease_epoch` advances with the run's end, so a holder declared dead that wakes up
   * (SIGCONT, a healed partition) cannot append even if nobody claims the session after it
   * (fleet-design.md §4). Only a still-running run changes, and only then the epoch.
   * The session row is locked first, in the order claimSession locks (session, then runs),
   * so the two never deadlock; whichever comes second sees the other's result.
   *
   * A run a cancel found running (contracts §9: its signal reached no worker, which died or
   * froze) ends `cancelled`, as its worker's end would have (cancel-reads.ts
   * `endsCancelled`), not `reason`. Returns the outcome stored, or null: nothing ended.
   */
  async endAbandonedRun(runId: string, reason: "crashed" | "stalled"): Promise<AbandonedRunEnd | null> {
    return (await this.endAbandonedRunAt(runId, reason))?.outcome ?? null;
  }

  /**
   * `endAbandonedRun`, with the session's last stored seq as the end left it (`lastSeq`): what
   * the run's end event follows. A sweeper that writes it later (frozen meanwhile) is then
   * seen behind a stream that a resume's messages moved on (event-writer.ts `writeAfterSync`).
   */
  async endAbandonedRunAt(
    runId: string,
    reason: "crashed" | "stalled",
  ): Promise<{ outcome: AbandonedRunEnd; lastSeq: number } | null> {
    const { sql } = this.database;
    const rows = await sql<{ ended_reason: AbandonedRunEnd; last_seq: number }[]>`
      with locked as (
        select id, ${endsCancelled(this.database, sql`${runId}::text`)}
          from sessions where id = (select session_id from runs where id = ${runId}) for update
      ), ended as (
        update runs set status = 'ended', ended_at = now(),
                        ended_reason = case when (select cancelled from locked) then 'cancelled' else ${reason} end
         where id = ${runId} and (status = 'running') is true and session_id = (select id from locked)
        returning session_id, ended_reason
      )
      update sessions set lease_epoch = lease_epoch + 1, updated_at = now()
       where id = (select session_id from ended)
      returning (select ended_reason from ended), last_seq`;
    const row = rows[0];
    return row?.ended_reason ? { outcome: row.ended_reason, lastSeq: row.last_seq } : null;
  }
}

/**
 * The first running run in runs_unfinished_idx's order (status, created_at): an ordered
 * LIMIT 1, which Postgres reads by a plain index scan, and a plain index scan marks the
 * entries it finds dead (old versions of runs since ended) so that no later scan reads them
 * again. The statements that read all running or queued runs are planned as bitmap scans,
 * which never mark them: with autovacuum off nothing removed them, and after a batch each
 * tick read every old queued and running version of its runs, and with them every block of
 * `runs` (the running runs every 200 ms; test/plans-after-batch.test.ts). Used as their
 * gate (a one-time filter): they run only when it finds a run, after it has walked the
 * dead entries in front of it. A scalar subquery, not EXISTS: Postgres drops an EXISTS
 * subquery's ORDER BY and LIMIT, and may then read it by a sequential scan.
 */
const FIRST_RUNNING = "select 1 from runs f where f.status = 'running' order by f.created_at limit 1";

/**
 * The `page` CTE of the scans of queued runs: at most `limit` queued runs older than `ms`
 * (oldest first, after `after`), read by runs_unfinished_idx. The statements built on it
 * look the page's sessions and runs up by key (a join driven by the page), and are sent
 * unprepared (postgres.js `unsafe`): each run is planned for the tables as they are. A
 * prepared one kept the generic plan Postgres made while the tables were empty, a fresh
 * fleet's first seconds, and with no ANALYZE since (autovacuum off) read every row of
 * `sessions` or `runs` at each tick of a batch, or its square with a correlated look-up
 * (test/plans-fresh-fleet.test.ts, test/plans-after-batch.test.ts). Each table is read
 * once at most when a plan hashes instead.
 */
function pageOfQueuedRuns(
  ms: number,
  limit: number,
  after: QueuedRun | undefined,
): { text: string; params: (string | number)[] } {
  return {
    text: `page as materialized (
        select r.id, r.session_id, r.kind, r.job_id, r.created_at from runs r
         where r.status = 'queued' and r.created_at < now() - make_interval(secs => $1::float8)
           ${after ? "and (r.created_at, r.id) > ($3::timestamptz, $4::text)" : ""}
           and (select 1 from runs f
                 where f.status = 'queued' and f.created_at < now() - make_interval(secs => $1::float8)
                   ${after ? "and f.created_at >= $3::timestamptz" : ""}
                 order by f.created_at limit 1) is not null
         order by r.created_at, r.id limit $2::int
      )`,
    params: after ? [ms / 1000, limit, after.created_at, after.id] : [ms / 1000, limit],
  };
}
