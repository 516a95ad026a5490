/**
 * Whether a batch may still move (contracts §9): a session of it is `queued` or `running` as
 * batch counts name them (batches.ts) — an active session with a run queued or running, or one
 * started whose history has not reached its end (the sweeper resumes it or parks it next).
 * One session so is enough, so both halves stop at the first row they find, each on an index
 * range that holds only what may still move: the batch's unfinished runs
 * (`runs_batch_state_idx`) and its sessions mid-run (`sessions_batch_midrun_idx`). At the
 * end of a batch of 10,000 sessions, with as many runs of its tenant queued in another batch, a
 * look reads a handful of entries (test/batch-has-ended.test.ts); before, it read every
 * unfinished run of the tenant.
 *
 * The answer is that of one snapshot: two workers ending the batch's last two runs at once
 * commit each its own end, and the first look after both commits reads it ended. Who acts on
 * the end makes it happen once (`ended_at` set once, the webhook's job id, the stream's set of
 * written events).
 */
import type postgres from "postgres";

/** SQL, true while the batch `batch` (a parameter, or a column of an outer query) may still move. */
export function batchBusy(
  sql: postgres.Sql | postgres.TransactionSql,
  batch: postgres.Fragment,
): postgres.Fragment {
  return sql`(${runIn(sql, batch, "queued")} or ${runIn(sql, batch, "running")}
           or exists (select 1 from sessions s
                       where s.batch_id = ${batch} and s.status = 'active' and s.run_started
                         and s.tail_phase <> 'completed'))`;
}

/**
 * A run of the batch in this state, on an active session (a cancelled one's running run is being
 * aborted; the session is terminal already). The state is a value the planner learns when the
 * statement runs, so it is an index condition of `runs_batch_state_idx` whatever the statistics
 * say (they were taken before the batch, or while it ran): not a filter after reading the
 * batch's ended runs, and no partial index on `status <> 'ended'` (every unfinished run of the
 * fleet) qualifies.
 */
function runIn(
  sql: postgres.Sql | postgres.TransactionSql,
  batch: postgres.Fragment,
  status: "queued" | "running",
) {
  return sql`exists (select 1 from runs r
                      where r.batch_id = ${batch} and r.status = (select ${status}::text)
                        and (select s.status from sessions s where s.id = r.session_id) = 'active')`;
}
