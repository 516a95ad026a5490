/**
 * A batch's counts (contracts §9), computed from its sessions' and runs' current state in one
 * statement (batches.ts says how a session counts); given a transaction's `sql`, they share a
 * snapshot with the batch's row (BatchStore's `view`).
 */
import type postgres from "postgres";
import type { BatchCounts } from "../api-types.js";

export type Sql = postgres.Sql | postgres.TransactionSql;

/** A batch's counts as `counts` reads them, with `sql` (a transaction's, for one snapshot with its row). */
export async function countsOf(sql: Sql, id: string): Promise<BatchCounts> {
  const [row] = await sql<BatchCounts[]>`
    with s as (
      select s.id, s.status, s.tail_state, s.run_started from sessions s where s.batch_id = ${id}
    ), a as (
      select r.session_id, bool_or(r.status = 'running') as running from runs r
       where r.status <> 'ended' and r.session_id in (select id from s where status = 'active')
       group by r.session_id
    )
    select count(*)::int as total,
           count(*) filter (where s.status = 'cancelled')::int as cancelled,
           count(*) filter (where s.status = 'parked')::int as parked,
           count(*) filter (where s.status = 'active' and (a.running
              or (a.session_id is null and s.run_started and s.tail_state <> 'completed')))::int as running,
           count(*) filter (where s.status = 'active' and not a.running)::int as queued,
           count(*) filter (where s.status = 'active' and a.session_id is null
              and (s.tail_state = 'completed' or not s.run_started))::int as completed
      from s left join a on a.session_id = s.id`;
  return row!;
}
