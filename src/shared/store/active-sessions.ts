/**
 * A tenant's cap on active sessions (contracts §10, FLEET_TENANT_MAX_ACTIVE_SESSIONS): a
 * session is active while a run of it is queued or running, and while it waits for its
 * automatic resume. The cap is checked in the transaction that queues the runs, after taking
 * a per-tenant advisory lock, so requests that race each other cannot together go past it.
 * The count is read from the partial indexes `runs_tenant_active_idx` and
 * `sessions_tenant_attention_idx`, and a queued run's session by key (a parked one's do not count).
 */
import type postgres from "postgres";
import { FleetStateError, TooManyRequestsError } from "../errors.js";

/** What a 429 for active sessions asks the caller to wait: sessions end on their own time. */
export const ACTIVE_RETRY_AFTER_SECONDS = 5;

/**
 * Active sessions of `tenant`, leaving out `except` (a session about to get another run). A
 * parked session's queued runs (a message that waits for someone to act: waiting-input.ts)
 * are no one's work until then, and do not count: its sessions are looked up only for the
 * queued runs, each by key.
 *
 * A session in the sweeper's attention set (active, started, its history open) counts too,
 * with no run: an interrupted run is ended in one transaction and its resume queued in
 * another (the sweeper's end of a dead worker's run, then its resume; a worker's end of a run
 * its model failed, then the sweeper's next tick). Counted only by its runs, the session left
 * the cap for that moment, a send waiting for room took its place, and the resume put the
 * tenant over its cap (9 active of 8 under kills: test/active-cap-awaiting-resume.test.ts).
 */
export async function countActiveSessions(
  sql: postgres.Sql | postgres.TransactionSql,
  tenant: string,
  except?: string,
): Promise<number> {
  const [row] = await sql<{ n: number }[]>`
    select count(*)::int as n from (
      select r.session_id from runs r
       where r.tenant = ${tenant} and r.status <> 'ended' ${except === undefined ? sql`` : sql`and r.session_id <> ${except}`}
         and (r.status <> 'queued'
              or not exists (select 1 from sessions s where s.id = r.session_id and s.status = 'parked'))
      union
      select s.id from sessions s
       where s.tenant = ${tenant} and s.status = 'active' and s.run_started and s.tail_phase = 'open'
         ${except === undefined ? sql`` : sql`and s.id <> ${except}`}
    ) active`;
  return row?.n ?? 0;
}

/**
 * Takes `tenant`'s lock for the rest of the transaction and refuses (TooManyRequestsError)
 * when `adding` more active sessions would put it over `max`. `except`: a session that gets
 * a run and may already be active (it counts once either way).
 */
export async function holdActiveSessions(
  tx: postgres.TransactionSql,
  tenant: string,
  adding: number,
  max: number,
  except?: string,
): Promise<void> {
  // More than the cap at once never fits, however long the caller waits: not a 429.
  if (adding > max)
    throw new FleetStateError(
      "sessions",
      `${adding} sessions with input at once are more than tenant "${tenant}" may ever have active ` +
        `(FLEET_TENANT_MAX_ACTIVE_SESSIONS: ${max}); send at most ${max} at once`,
    );
  await tx`select pg_advisory_xact_lock(hashtextextended(${`fleet-active:${tenant}`}, 0))`;
  const active = await countActiveSessions(tx, tenant, except);
  if (active + adding <= max) return;
  const room = Math.max(0, max - active);
  throw new TooManyRequestsError(
    "active_sessions",
    ACTIVE_RETRY_AFTER_SECONDS,
    `tenant "${tenant}" may have at most ${max} active sessions (FLEET_TENANT_MAX_ACTIVE_SESSIONS); ` +
      `${active} are queued or running, so ${adding} more ${adding === 1 ? "does" : "do"} not fit` +
      (adding > 1 ? ` (room for ${room})` : ""),
  );
}

/**
 * Whether `tenant` has a run waiting to start (fair dispatch starts it over when not). A
 * message waiting on a parked session (waiting-input.ts) has no job in the queue and none
 * until someone acts: it is not one, or one such message kept its tenant's later runs
 * behind every other tenant's backlog after a cancel for good.
 */
export async function hasQueuedRuns(
  sql: postgres.Sql | postgres.TransactionSql,
  tenant: string,
): Promise<boolean> {
  const rows = await sql`
    select 1 from runs r where r.tenant = ${tenant} and r.status <> 'ended' and r.status = 'queued'
       and not exists (select 1 from sessions s where s.id = r.session_id and s.status = 'parked')
     limit 1`;
  return rows.length > 0;
}
