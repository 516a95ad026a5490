/**
 * How an append or a run's end reads a cancel from the session's row it locks (contracts §9):
 * SQL fragments shared by the single statements (single-appends.ts), the grouped ones
 * (grouped-appends.ts) and the end of a run that appends nothing (fenced-runs.ts `endRun`).
 */
import type postgres from "postgres";
import type { Database } from "../db/client.js";

/**
 * The session's status as the appending run (`runId`, an SQL expression) is to see it:
 * `cancelled` also when the session's last cancel found that run running (`cancelled_runs`,
 * batch-cancel.ts), though a new message re-opened the session since and the cancel's signal
 * never reached the run's worker. Read from the row the append updates, after its lock.
 */
export const statusForRun = (database: Database, runId: postgres.Fragment) => database.sql`
  case when ${runId} = any(sessions.cancelled_runs) then 'cancelled' else sessions.status end as status`;

/**
 * Whether the session's last cancel found the run `runId` (an SQL expression) running, though
 * a new message re-opened the session since: the run's end parks nothing for it.
 */
export const runCancelled = (database: Database, runId: postgres.Fragment) => database.sql`
  coalesce(${runId} = any(sessions.cancelled_runs), false)`;

/**
 * A run's end (its last append with it) as the session's row says after its lock: `cancelled`
 * when a cancel committed while the run was running (contracts §9: its signal may never have
 * reached the worker, or came once the model had answered), so the run ends `cancelled`, not
 * with the outcome its worker sent. `sessions.status`, the session's own, still picks its next run.
 * A run's end that appends nothing reads the same (fenced-runs.ts `endRun`).
 */
export const endsCancelled = (database: Database, runId: postgres.Fragment) => database.sql`
  (${runCancelled(database, runId)} or sessions.status = 'cancelled') as cancelled`;
