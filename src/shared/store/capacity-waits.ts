/**
 * A run that waits for its endpoint's capacity (contracts §15) is handed back, not failed:
 * its row goes from `running` back to `queued` (its `started_at` kept: that is how the next
 * worker knows it continues a run rather than starting one), with what it did so far in its
 * usage JSON. Nothing treats it as interrupted: the sweeper's abandoned-run scan looks at
 * `running` rows only, its orphan scan leaves a queued run whose job is `delayed` alone, and
 * `claimSession` ends only `running` rows. The run's job waits in BullMQ's delayed set; the
 * claim that takes it again finds this run as the session's oldest queued one.
 *
 * Both statements are fenced by the session's epoch, like every write of a worker.
 */

import type { Database } from "../db/client.js";
import { FencedError } from "../errors.js";
import type { RunUsage } from "../messages.js";
import type { Fence } from "./fenced-writes.js";

/** What a handed-back run carries in `runs.usage` while it waits (and, `waitedMs`, after). */
export type WaitingUsage = RunUsage & {
  /** Time its model requests waited for capacity, all of it (contracts §15). */
  waitedMs?: number;
  /** Times the run was handed back. */
  handBacks?: number;
  /** While handed back: model calls it made so far (for `maxTurns`). */
  turns?: number;
  /** While handed back: when its pending request first asked for capacity (epoch ms). */
  askedAt?: number;
  /**
   * While handed back: when a worker first found its agent written by a newer release
   * (newer-agent-wait.ts; epoch ms, Postgres's clock). Dropped once a worker reads the agent.
   */
  newerAgentSince?: number;
};

/** What `handBackNewerAgent` did: `expired`, the run was not handed back, the bound is past. */
export type NewerAgentHandBack =
  | { outcome: "handed" | "cancelled" | "not_running" }
  | { outcome: "expired"; waitedMs: number };

/** What `handBack` did: see there. */
export type HandBackOutcome = "handed" | "cancelled" | "not_running";

export class CapacityWaits {
  constructor(private readonly database: Database) {}

  /**
   * Hands a running run back: `queued` again, no worker. `unreserveModelCall`: the model call
   * counted against `agent.budget.maxModelCalls` for the request that was never sent is given
   * back. Answers `handed`; `cancelled` when the session was cancelled (contracts §9) while the
   * run was running — a cancel ends queued runs only, so a run handed back after it would be
   * queued on the cancelled session and go on when its job came back: it is left running, for
   * its worker to end `cancelled`; `not_running` when the run was not running. Nothing changes
   * unless `handed`. The session row is locked as a cancel locks it: one of them goes first.
   */
  async handBack(
    fence: Fence,
    runId: string,
    usage: WaitingUsage,
    options: { unreserveModelCall: boolean },
  ): Promise<HandBackOutcome> {
    const [row] = await this.database.sql<{ fence_ok: boolean; cancelled: boolean; handed: boolean }[]>`
      with s as (
        select id, status from sessions where id = ${fence.sessionId} and lease_epoch = ${fence.epoch} for update
      ), u as (
        update runs set status = 'queued', worker_id = null, usage = ${JSON.stringify(usage)}::jsonb
         where id = ${runId} and (status = 'running') is true
           and session_id = (select id from s where status <> 'cancelled')
        returning 1
      ), m as (
        update sessions set model_calls = greatest(model_calls - 1, 0)
         where ${options.unreserveModelCall} and id = (select id from s) and exists (select 1 from u)
        returning 1
      )
      select exists (select 1 from s) as fence_ok, exists (select 1 from s where status = 'cancelled')
               and exists (select 1 from runs where id = ${runId} and (status = 'running') is true) as cancelled,
             exists (select 1 from u) as handed`;
    if (!row!.fence_ok) throw new FencedError(fence.sessionId, fence.epoch);
    return row!.handed ? "handed" : row!.cancelled ? "cancelled" : "not_running";
  }

  /**
   * Hands back a running run whose agent this worker cannot read because a newer release
   * wrote it, as `handBack` does, while less than `waitMs` passed since a worker first did so
   * for this run (`newerAgentSince`, kept in its usage on Postgres's clock); past that,
   * `expired` and nothing changes (the caller ends the run).
   */
  async handBackNewerAgent(
    fence: Fence,
    runId: string,
    usage: WaitingUsage,
    waitMs: number,
  ): Promise<NewerAgentHandBack> {
    const [row] = await this.database.sql<
      { fence_ok: boolean; cancelled: boolean; handed: boolean; waited_ms: number | null }[]
    >`
      with s as (
        select id, status from sessions where id = ${fence.sessionId} and lease_epoch = ${fence.epoch} for update
      ), r as (
        select id, coalesce((usage->>'newerAgentSince')::float8, t.now_ms) as since, t.now_ms
          from runs cross join (select extract(epoch from clock_timestamp()) * 1000 as now_ms) t
         where id = ${runId} and (status = 'running') is true
           and session_id = (select id from s where status <> 'cancelled')
      ), u as (
        update runs set status = 'queued', worker_id = null,
               usage = ${JSON.stringify(usage)}::jsonb || jsonb_build_object('newerAgentSince', r.since)
          from r where runs.id = r.id and r.now_ms - r.since < ${waitMs}
        returning 1
      )
      select exists (select 1 from s) as fence_ok, exists (select 1 from s where status = 'cancelled')
               and exists (select 1 from runs where id = ${runId} and (status = 'running') is true) as cancelled,
             exists (select 1 from u) as handed, (select (now_ms - since)::float8 from r) as waited_ms`;
    if (!row!.fence_ok) throw new FencedError(fence.sessionId, fence.epoch);
    if (row!.handed) return { outcome: "handed" };
    if (row!.waited_ms !== null) return { outcome: "expired", waitedMs: row!.waited_ms };
    return { outcome: row!.cancelled ? "cancelled" : "not_running" };
  }

  /** Takes a handed-back run again: `running` under this worker. False when it is no longer queued. */
  async continueRun(fence: Fence, runId: string, workerId: string): Promise<boolean> {
    const [row] = await this.database.sql<{ fence_ok: boolean; continued: boolean }[]>`
      with u as (
        update runs set status = 'running', worker_id = ${workerId}
         where id = ${runId} and (status = 'queued') is true and started_at is not null
           and exists (select 1 from sessions where id = ${fence.sessionId} and lease_epoch = ${fence.epoch})
        returning 1
      )
      select exists (select 1 from sessions where id = ${fence.sessionId} and lease_epoch = ${fence.epoch}) as fence_ok,
             exists (select 1 from u) as continued`;
    if (!row!.fence_ok) throw new FencedError(fence.sessionId, fence.epoch);
    return row!.continued;
  }
}

/** Whether a queued run is a handed-back one (it started before). */
export function isHandedBack(run: { status: string; startedAt: Date | null }): boolean {
  return run.status === "queued" && run.startedAt !== null;
}
