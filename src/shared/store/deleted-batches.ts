/**
 * A batch marked deleted (`DELETE /v1/batches/:id`, data-deletion.ts `markBatchDeleted`) is
 * gone for its tenant at once, with its sessions and their runs, though they are purged chunk
 * by chunk after the mark (by the sweeper when the API stops or runs out of time): every read
 * the API makes for a tenant leaves them out with this condition, so that each route answers
 * a session or run of it exactly as an id that does not exist (contracts §10's 404), not as a
 * cancelled session that may still be read, patched, resumed or deleted on its own.
 */
import type postgres from "postgres";

/** How long `DELETE /v1/batches/:id` purges the batch's sessions before leaving the rest to the sweeper. */
export const BATCH_DELETE_BUDGET_MS = 20_000;

/**
 * How long after its mark a batch deletion is left to the request that marked it, before a
 * sweeper finishes it (that request stopped, or ran out of its budget). Earlier, the sweeper's
 * retention timer shared the chunks of a DELETE still under way: the request answered
 * `sessionsDeleted` short of the batch's sessions (0 when the sweeper came first) and the
 * sweeper counted a user's deletion as `trigger="retention"`.
 */
export const BATCH_DELETE_HANDOVER_MS = 3 * BATCH_DELETE_BUDGET_MS;

/** SQL, true unless the row (`s`: a session, `r`: a run) belongs to a batch marked deleted. */
export function notInDeletedBatch(
  sql: postgres.Sql | postgres.TransactionSql,
  alias: "s" | "r",
): postgres.Fragment {
  return sql`not exists (select 1 from batches gone where gone.id = ${sql(alias)}.batch_id
                          and gone.deleted_at is not null)`;
}
