/**
 * Every write a worker makes to a session, each one fenced by the lease epoch inside the
 * same statement or transaction: a worker that lost its lease changes nothing, and learns
 * it from a FencedError. See fleet-design.md §4.
 */
import type postgres from "postgres";
import type { Database } from "../db/client.js";
import { FencedError } from "../errors.js";
import type { Message, StoredMessage, Usage } from "../messages.js";
import type { TailState } from "../tail-state.js";
import { type NewMessageRow, toNewRows } from "./rows.js";

/** What a writer proves on every write: the session, its epoch, and the history it has seen. */
export type Fence = { sessionId: string; epoch: number };

/** Where a history stands, so the next append can be numbered and checked. */
export type HistoryCursor = { lastSeq: number; lastStepSeq: number | null };

type Tx = postgres.TransactionSql | postgres.Sql;

async function insertFenced(
  tx: Tx,
  fence: Fence,
  cursor: HistoryCursor,
  runId: string | null,
  rows: NewMessageRow[],
  tail: TailState,
): Promise<{ seq: number; created_at: Date }[]> {
  // One statement: the session update is the fence (epoch and last_seq must both match);
  // when it matches no row, the insert inserts nothing.
  return tx<{ seq: number; created_at: Date }[]>`
    with s as (
      update sessions
         set last_seq = ${cursor.lastSeq + rows.length}, tail_state = ${tail},
             last_active_at = now(), updated_at = now()
       where id = ${fence.sessionId} and lease_epoch = ${fence.epoch} and last_seq = ${cursor.lastSeq}
      returning id
    )
    insert into messages (session_id, seq, role, content, tool_calls, tool_call_id, call_seq, name, success, stop_reason, usage, run_id)
    select s.id, m.seq, m.role, m.content, m.tool_calls, m.tool_call_id, m.call_seq, m.name, m.success, m.stop_reason, m.usage, ${runId}
      from s cross join jsonb_to_recordset(${JSON.stringify(rows)}::jsonb) as m(
        seq int, role text, content text, tool_calls jsonb, tool_call_id text, call_seq int,
        name text, success boolean, stop_reason text, usage jsonb)
    returning seq, created_at`;
}

function stored(
  messages: readonly Message[],
  inserted: { seq: number; created_at: Date }[],
): StoredMessage[] {
  return messages.map((m, i) => ({
    ...m,
    seq: inserted[i]!.seq,
    createdAt: new Date(inserted[i]!.created_at).toISOString(),
  }));
}

export class FencedWrites {
  constructor(private readonly database: Database) {}

  /**
   * Bumps the session's epoch for a new lease holder. Returns the new epoch, or null for an
   * unknown session. Whoever held an older epoch can no longer write.
   */
  async takeEpoch(sessionId: string, workerId: string): Promise<number | null> {
    const rows = await this.database.sql<{ lease_epoch: string }[]>`
      update sessions set lease_epoch = lease_epoch + 1, lease_owner = ${workerId},
                          last_active_at = now(), updated_at = now()
       where id = ${sessionId} returning lease_epoch`;
    return rows[0] ? Number(rows[0].lease_epoch) : null;
  }

  /** A sign of life that also proves ownership; throws FencedError when the lease is lost. */
  async touch(fence: Fence): Promise<void> {
    const rows = await this.database.sql`
      update sessions set last_active_at = now()
       where id = ${fence.sessionId} and lease_epoch = ${fence.epoch} returning 1`;
    if (rows.length === 0) throw new FencedError(fence.sessionId, fence.epoch);
  }

  /** Appends messages after `cursor`; throws FencedError when the lease or the history moved. */
  async append(
    fence: Fence,
    cursor: HistoryCursor,
    runId: string | null,
    messages: readonly Message[],
    tail: TailState,
  ): Promise<StoredMessage[]> {
    if (messages.length === 0) return [];
    const rows = toNewRows(messages, cursor.lastSeq, cursor.lastStepSeq);
    const inserted = await insertFenced(this.database.sql, fence, cursor, runId, rows, tail);
    if (inserted.length !== messages.length) throw new FencedError(fence.sessionId, fence.epoch);
    return stored(messages, inserted);
  }

  /**
   * Starts a queued run: appends what must come first (closed tool calls and the user
   * message, or what the resume kind requires) and marks the run running, atomically.
   * Returns null when the run was not queued any more (someone else started it).
   */
  async startRun(
    fence: Fence,
    cursor: HistoryCursor,
    run: { id: string; workerId: string; resumeKind: string | null },
    messages: readonly Message[],
    tail: TailState,
  ): Promise<StoredMessage[] | null> {
    const rows = toNewRows(messages, cursor.lastSeq, cursor.lastStepSeq);
    return this.database.sql.begin(async (tx) => {
      const started = await tx`
        update runs set status = 'running', started_at = now(), worker_id = ${run.workerId},
                        resume_kind = coalesce(${run.resumeKind}, resume_kind)
         where id = ${run.id} and status = 'queued'
           and exists (select 1 from sessions where id = ${fence.sessionId} and lease_epoch = ${fence.epoch})
        returning 1`;
      if (started.length === 0) {
        await assertFence(tx, fence);
        return null;
      }
      if (rows.length === 0) {
        await assertFence(tx, fence);
        return [];
      }
      const inserted = await insertFenced(tx, fence, cursor, run.id, rows, tail);
      if (inserted.length !== rows.length) throw new FencedError(fence.sessionId, fence.epoch);
      return stored(messages, inserted);
    }) as Promise<StoredMessage[] | null>;
  }

  /** Records how a run ended. Fenced: a worker that lost the lease cannot rewrite history. */
  async endRun(
    fence: Fence,
    runId: string,
    outcome: string,
    detail: { error?: string | null; usage?: Usage | null } = {},
  ): Promise<void> {
    const rows = await this.database.sql`
      update runs set status = 'ended', ended_reason = ${outcome}, ended_at = now(),
                      error = ${detail.error ?? null}, usage = ${detail.usage ? JSON.stringify(detail.usage) : null}::jsonb
       where id = ${runId} and status <> 'ended'
         and exists (select 1 from sessions where id = ${fence.sessionId} and lease_epoch = ${fence.epoch})
      returning 1`;
    if (rows.length === 0) await assertFence(this.database.sql, fence);
    if (outcome === "completed") {
      // The session made it: its count of automatic resume attempts starts again.
      await this.database.sql`
        update sessions set resume_attempts = 0, next_resume_at = null
         where id = ${fence.sessionId} and lease_epoch = ${fence.epoch} and resume_attempts <> 0`;
    }
  }

  /**
   * Runs left `running` by an earlier holder (who crashed, froze or was fenced out) are
   * ended as `crashed` by the new holder. Returns their ids.
   */
  async endStaleRuns(fence: Fence, outcome = "crashed"): Promise<string[]> {
    const rows = await this.database.sql<{ id: string }[]>`
      update runs set status = 'ended', ended_reason = ${outcome}, ended_at = now()
       where session_id = ${fence.sessionId} and status = 'running'
         and exists (select 1 from sessions where id = ${fence.sessionId} and lease_epoch = ${fence.epoch})
      returning id`;
    return rows.map((r) => r.id);
  }
}

async function assertFence(tx: Tx, fence: Fence): Promise<void> {
  const rows =
    await tx`select 1 from sessions where id = ${fence.sessionId} and lease_epoch = ${fence.epoch}`;
  if (rows.length === 0) throw new FencedError(fence.sessionId, fence.epoch);
}
