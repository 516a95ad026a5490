/**
 * What a lease holder asks before it acts, each fenced by the lease epoch (FencedWrites'
 * `holdsEpoch`, `sessionCancelled` and `reserveModelCall`): whether it still holds its epoch,
 * whether its session was cancelled, and a model call counted against the budget.
 */
import { randomUUID } from "node:crypto";
import type { Database } from "../db/client.js";
import { FencedError } from "../errors.js";
import type { Fence } from "./fenced-rows.js";

/**
 * Whether the session's epoch is still `fence.epoch`: nobody claimed it and no sweeper
 * ended its run since this holder's claim. A worker that took its lapsed lease back asks
 * this before it acts again (session-job.ts).
 */
export async function holdsEpoch(database: Database, fence: Fence): Promise<boolean> {
  const [row] = await database.sql<{ lease_epoch: string }[]>`
      select lease_epoch from sessions where id = ${fence.sessionId}`;
  return row !== undefined && Number(row.lease_epoch) === fence.epoch;
}

/**
 * Whether the session was cancelled (contracts §9): asked right before a tool starts. A
 * cancel commits `status = 'cancelled'` before its request returns, so a tool that passes
 * this check started before the cancel was answered. With `runId`, also true when the
 * session's last cancel found that run running (`cancelled_runs`, batch-cancel.ts). Throws FencedError when the epoch moved.
 */
export async function sessionCancelled(database: Database, fence: Fence, runId?: string): Promise<boolean> {
  const [row] = await database.sql<{ status: string; lease_epoch: string; run_cancelled: boolean | null }[]>`
      select status, lease_epoch, ${runId ?? null}::text = any(cancelled_runs) as run_cancelled
        from sessions where id = ${fence.sessionId}`;
  if (!row || Number(row.lease_epoch) !== fence.epoch) throw new FencedError(fence.sessionId, fence.epoch);
  // A cancel that found `runId` running cancelled it, though a new message re-opened the session since.
  return row.status === "cancelled" || row.run_cancelled === true;
}

/**
 * Counts one model call against `agent.budget.maxModelCalls` before it is made, so that
 * a call cut off by a crash counts too. False when the budget is spent. Fenced.
 *
 * `key` names this reservation: the same reservation sent again (db-rideout.ts, after a
 * lost answer) with the same key finds it stored in `model_call_key` and answers true
 * without counting it again, even when its first try is still running in Postgres (the
 * row lock makes the retry wait, and it reads the row its first try left). One holder
 * reserves one call at a time, so the last key is all there is to remember (a failed
 * attempt's billed tokens are counted under a key of their own in the same column, between
 * two reservations: billed-tokens.ts).
 */
export async function reserveModelCall(
  database: Database,
  fence: Fence,
  max: number,
  key: string = randomUUID(),
): Promise<boolean> {
  const [row] = await database.sql<{ reserved: boolean; fence_ok: boolean }[]>`
      with u as (
        update sessions
           set model_calls = model_calls + (case when model_call_key is distinct from ${key} then 1 else 0 end),
               model_call_key = ${key}
         where id = ${fence.sessionId} and lease_epoch = ${fence.epoch}
           and (model_calls < ${max} or model_call_key = ${key})
        returning 1
      )
      select exists (select 1 from u) as reserved,
             exists (select 1 from sessions where id = ${fence.sessionId} and lease_epoch = ${fence.epoch}) as fence_ok`;
  if (!row!.fence_ok) throw new FencedError(fence.sessionId, fence.epoch);
  return row!.reserved;
}
