/**
 * Tokens a failed model attempt was billed for, counted in the session's `tokens_used` (what
 * `agent.budget.maxTokens` and later runs' budgets read) as soon as the attempt failed: an
 * attempt that failed before any output after its provider reported usage (call-model.ts). No
 * stored step holds them yet, and none may ever: a worker killed before its run's end would
 * lose them if they waited for it. The step its retry stores, whose usage holds them too, is
 * then appended without counting them again (agent-loop.ts).
 */
import { randomUUID } from "node:crypto";
import type { Database } from "../db/client.js";
import { FencedError } from "../errors.js";
import type { Fence } from "./fenced-rows.js";

/**
 * Adds `tokens` to the session's `tokens_used`. Fenced: a holder that lost the session adds
 * nothing and learns it from a FencedError.
 *
 * `key` names this write, as a model call's reservation is named (fence-checks.ts
 * `reserveModelCall`), in the same column: the same write sent again after its answer was lost
 * (db-rideout.ts) finds its key and adds nothing. One holder makes one such keyed write at a
 * time (its agent loop awaits each), so the last key is all there is to remember for both.
 */
export async function countBilledTokens(
  database: Database,
  fence: Fence,
  tokens: number,
  key: string = randomUUID(),
): Promise<void> {
  const add = Math.max(0, Math.ceil(tokens));
  const [row] = await database.sql<{ fence_ok: boolean }[]>`
      with u as (
        update sessions
           set tokens_used = tokens_used + (case when model_call_key is distinct from ${key} then ${add} else 0 end),
               model_call_key = ${key}
         where id = ${fence.sessionId} and lease_epoch = ${fence.epoch}
        returning 1
      )
      select exists (select 1 from u) as fence_ok`;
  if (!row!.fence_ok) throw new FencedError(fence.sessionId, fence.epoch);
}
