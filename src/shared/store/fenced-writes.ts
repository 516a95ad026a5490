/**
 * Every write a worker makes to a session, each fenced by the lease epoch inside the same
 * statement: a worker that lost its lease changes nothing and learns it from a FencedError.
 * Each operation is one round trip (data-modifying CTEs), because these statements are the
 * worker's hot path. See fleet-design.md §4.
 */
import { randomUUID } from "node:crypto";
import type { Database } from "../db/client.js";
import type { RunRow } from "../db/schema.js";
import { FencedError } from "../errors.js";
import type { Message, StoredMessage, Usage } from "../messages.js";
import type { TailState } from "../tail-state.js";
import { TurnBatch } from "../turn-batch.js";
import { withFields } from "../with-fields.js";
import { judgeAppend, readAfterCursor } from "./committed-appends.js";
import { GroupCommit, type Settled } from "./group-commit.js";
import {
  type AppendOutcome,
  appendAlone,
  appendsTogether,
  type EndingAppend,
  type EndingOutcome,
  endingAppendAlone,
  endingAppendsTogether,
  type Inserted,
  type SessionAppend,
} from "./grouped-appends.js";
import { type ClaimRequest, type ClaimRow, claimAlone, claimsTogether } from "./grouped-claims.js";
import { readClaimedHistory } from "./history-reads.js";
import { json, messageFromRaw, type RawMessage, type RawRun, runFromRaw, toNewRows } from "./rows.js";

/** What a writer proves on every write: the session and its epoch. */
export type Fence = { sessionId: string; epoch: number };

/** Where a history stands, so the next append can be numbered and checked. */
export type HistoryCursor = { lastSeq: number; lastStepSeq: number | null };

/** What a new lease holder learns when it claims a session. */
export type Claim = {
  epoch: number;
  /** The stored agent configuration (validated by the caller). */
  agent: unknown;
  /** Tokens its model steps used so far, across all runs (for `agent.budget.maxTokens`). */
  tokensUsed: number;
  /** Whether its event stream is written (false: created with `sessionEvents: false`). */
  sessionEvents: boolean;
  /** Runs an earlier holder left `running` (it crashed, froze or was fenced out), now ended `crashed`. */
  staleRunIds: string[];
  /** The same runs with their kind (for `fleet_runs_total{kind}`). */
  staleRuns: { id: string; kind: "run" | "resume" }[];
  /** The next queued run (schema.ts `queueSeq`), if any (none while the session is parked: it waits for someone to act). */
  next: RunRow | null;
  /**
   * The stored history: read in the same statement, or a long one under the claim's epoch right
   * after it (only from where `known` ends, when it was given and still holds: then it is
   * `known`, grown by what was stored after it).
   */
  history: StoredMessage[];
  /** How many stored messages the claim read from Postgres (the whole history, or less with `known`). */
  historyRead: number;
  /**
   * When the claim also started `next` (claimSession's `startFirst`): what that start
   * appended (the user message), not in `history`. Null when the caller must start it.
   */
  started: StoredMessage[] | null;
};

/** An append as the statements take it: numbered after `cursor`, fenced by `fence`. */
function sessionAppend(
  fence: Fence,
  cursor: HistoryCursor,
  runId: string | null,
  messages: readonly Message[],
  tail: TailState,
  estimatedTokens: number,
): SessionAppend {
  return {
    sessionId: fence.sessionId,
    epoch: fence.epoch,
    lastSeq: cursor.lastSeq,
    tail,
    tokens: tokensOf(messages) + Math.max(0, Math.ceil(estimatedTokens)),
    runId,
    rows: toNewRows(messages, cursor.lastSeq, cursor.lastStepSeq),
  };
}

/** The parked reason stored when a limit parks the session in the statement that ends its run. */
function parkedReason(park: { reason: string; detail?: string } | undefined): string | null {
  return park ? stripNul(park.detail ? `${park.reason}: ${park.detail}` : park.reason) : null;
}

/** Tokens the model steps among `messages` reported (for `agent.budget.maxTokens`). */
function tokensOf(messages: readonly Message[]): number {
  let tokens = 0;
  for (const m of messages)
    if (m.role === "assistant" && m.usage) tokens += m.usage.inputTokens + m.usage.outputTokens;
  return tokens;
}

/** Postgres text cannot hold U+0000; error texts may quote what a model or tool produced. */
function stripNul(text: string): string {
  return text.includes("\u0000") ? text.replaceAll("\u0000", "\uFFFD") : text;
}

function stored(
  messages: readonly Message[],
  inserted: readonly { seq: number; created_at: string | Date }[],
): StoredMessage[] {
  const bySeq = [...inserted].sort((a, b) => a.seq - b.seq);
  // Filled by push, not by `.map`, whose arrays have one elements kind from the builtin and
  // another from optimized code that inlines it: the agent loop's reads of these arrays were
  // optimized for one and thrown away at the first of the other (event-writer.ts).
  const out: StoredMessage[] = [];
  for (const [i, m] of messages.entries()) {
    const seq = bySeq[i]!.seq;
    const createdAt = new Date(bySeq[i]!.created_at).toISOString();
    // Not `{ ...m, seq, … }`, which made new hidden classes for each message (with-fields.ts).
    // As a read gives it back (rows.ts): unknown usage is `null`, so a MESSAGE event is
    // exactly the stored message (contracts §7, §13).
    out.push(
      m.role === "assistant"
        ? withFields(m, { usage: m.usage ?? null, seq, createdAt })
        : withFields(m, { seq, createdAt }),
    );
  }
  return out;
}

export class FencedWrites {
  /** The appends of one event-loop turn, in one statement per kind (group-commit.ts). */
  private readonly appends: TurnBatch<SessionAppend, Settled<AppendOutcome>>;
  private readonly endingAppends: TurnBatch<EndingAppend, Settled<EndingOutcome>>;
  /** The claims of one event-loop turn (a worker's start ramp), in one statement. */
  private readonly claims: TurnBatch<ClaimRequest, Settled<ClaimRow>>;

  constructor(
    private readonly database: Database,
    options: {
      /** false: every claim and append goes in a statement of its own. */
      groupWrites?: boolean;
      /** How long a write waits for others to share its statement (TurnBatch's gatherMs). */
      gatherMs?: number;
    } = {},
  ) {
    const group = options.groupWrites ?? true;
    const gather = options.gatherMs ?? 0;
    const appends = new GroupCommit<SessionAppend, AppendOutcome>(
      (batch) => appendsTogether(database, batch),
      (append) => appendAlone(database, append),
    );
    this.appends = new TurnBatch((batch) => appends.send(batch), 32, group, gather);
    const ending = new GroupCommit<EndingAppend, EndingOutcome>(
      (batch) => endingAppendsTogether(database, batch),
      (append) => endingAppendAlone(database, append),
    );
    this.endingAppends = new TurnBatch((batch) => ending.send(batch), 32, group, gather);
    const claims = new GroupCommit<ClaimRequest, ClaimRow>(
      (batch) => claimsTogether(database, batch),
      (claim) => claimAlone(database, claim),
    );
    this.claims = new TurnBatch((batch) => claims.send(batch), 32, group, gather);
  }

  /**
   * Takes a session for a new lease holder, in one statement: bumps the epoch (whoever held
   * an older one can no longer write), ends runs an earlier holder left running, and reads
   * the agent, the next queued run and the history. Null for an unknown session.
   *
   * With `startFirst`, the same statement also starts that next queued run when its start
   * needs nothing from the history: a run with new input (not handed back) on a session with
   * no message yet, whose start appends exactly the user message (start-run.ts) — the common
   * first run of a new session. `started` then holds that message; otherwise it is null and
   * the caller starts the run itself (startRun). The session row is locked first (the order
   * every writer of this session and its runs uses), so what the start checks is current.
   */
  async claimSession(
    sessionId: string,
    workerId: string,
    options: {
      startFirst?: { tail: TailState };
      /**
       * This session's history as an earlier job of this worker left it (history-cache.ts,
       * history-reads.ts `readClaimedHistory`): a long history is then read only from where
       * it ends, and pushed onto it. The caller must hand over an array no one else uses.
       */
      known?: StoredMessage[];
    } = {},
  ): Promise<Claim | null> {
    const answer = await this.claims.call({
      sessionId,
      workerId,
      startFirst: options.startFirst !== undefined,
      tail: options.startFirst?.tail ?? "awaiting_model",
    });
    if ("error" in answer) throw answer.error;
    const row = answer.outcome;
    if (!row) return null;
    const next = row.next ? runFromRaw(json<RawRun>(row.next)) : null;
    const started = row.started ? json<Inserted>(row.started) : null;
    const staleRuns = json<{ id: string; kind: "run" | "resume" }[]>(row.stale);
    const epoch = Number(row.lease_epoch);
    const read =
      row.history === null ? await readClaimedHistory(this.database, sessionId, epoch, options.known) : null;
    const history = read ? read.history : json<RawMessage[]>(row.history).map(messageFromRaw);
    return {
      epoch,
      agent: json(row.agent),
      tokensUsed: Number(row.tokens_used),
      sessionEvents: row.session_events !== false,
      staleRunIds: staleRuns.map((run) => run.id),
      staleRuns,
      next,
      started: started && next ? stored([{ role: "user", content: next.input ?? "" }], [started]) : null,
      history,
      historyRead: read ? read.read : history.length,
    };
  }

  /** Appends messages after `cursor`; throws FencedError when the lease or the history moved. */
  async append(
    fence: Fence,
    cursor: HistoryCursor,
    runId: string | null,
    messages: readonly Message[],
    tail: TailState,
    /**
     * Tokens to count against `agent.budget.maxTokens` for steps whose provider reported no
     * usage (an estimate: usage.ts); reported usage is counted from the messages.
     */
    estimatedTokens = 0,
  ): Promise<StoredMessage[]> {
    return (await this.appendStep(fence, cursor, runId, messages, tail, estimatedTokens)).stored;
  }

  /**
   * `append`, also answering whether the session was cancelled (contracts §9) and its
   * `sessionEvents` (which PATCH /v1/sessions/:id may change while a job runs), read from the
   * session row the append itself updated: it waits for a cancel in progress (row lock) and
   * sees it once committed, so it is the same check as `sessionCancelled` made in the
   * statement that proves the lease — and costs no round trip of its own. The agent loop
   * uses it before the tool that follows the append.
   */
  async appendStep(
    fence: Fence,
    cursor: HistoryCursor,
    runId: string | null,
    messages: readonly Message[],
    tail: TailState,
    estimatedTokens = 0,
  ): Promise<{ stored: StoredMessage[]; cancelled: boolean; sessionEvents?: boolean }> {
    if (messages.length === 0) return { stored: [], cancelled: false };
    const answer = await this.appends.call(
      sessionAppend(fence, cursor, runId, messages, tail, estimatedTokens),
    );
    if ("error" in answer) throw answer.error;
    const { inserted, status, sessionEvents } = answer.outcome;
    if (inserted.length !== messages.length) throw new FencedError(fence.sessionId, fence.epoch);
    return {
      stored: stored(messages, inserted),
      cancelled: status === "cancelled",
      ...(sessionEvents === null ? {} : { sessionEvents }),
    };
  }

  /**
   * Whether an append (`appendStep`'s arguments) that failed on a lost connection committed
   * before the connection died (committed-appends.ts): its stored messages as `appendStep`
   * answers them when it did, null when nothing was stored after `cursor` (it may be sent
   * again). Throws FencedError when the epoch or the history moved.
   */
  async findCommitted(
    fence: Fence,
    cursor: HistoryCursor,
    runId: string | null,
    messages: readonly Message[],
  ): Promise<{ stored: StoredMessage[]; cancelled: boolean; sessionEvents: boolean } | null> {
    const rows = toNewRows(messages, cursor.lastSeq, cursor.lastStepSeq);
    const read = await readAfterCursor(this.database, fence.sessionId, cursor.lastSeq, rows.length);
    const found = judgeAppend(read, { epoch: fence.epoch, lastSeq: cursor.lastSeq, runId, rows });
    if (found.found === "moved") throw new FencedError(fence.sessionId, fence.epoch);
    if (found.found === "none") return null;
    return {
      stored: stored(messages, found.inserted),
      cancelled: found.status === "cancelled",
      sessionEvents: found.sessionEvents,
    };
  }

  /**
   * Whether the session's epoch is still `fence.epoch`: nobody claimed it and no sweeper
   * ended its run since this holder's claim. A worker that took its lapsed lease back asks
   * this before it acts again (session-job.ts).
   */
  async holdsEpoch(fence: Fence): Promise<boolean> {
    const [row] = await this.database.sql<{ lease_epoch: string }[]>`
      select lease_epoch from sessions where id = ${fence.sessionId}`;
    return row !== undefined && Number(row.lease_epoch) === fence.epoch;
  }

  /**
   * Whether the session was cancelled (contracts §9): asked right before a tool starts. A
   * cancel commits `status = 'cancelled'` before its request returns, so a tool that passes
   * this check started before the cancel was answered. Throws FencedError when the epoch moved.
   */
  async sessionCancelled(fence: Fence): Promise<boolean> {
    const [row] = await this.database.sql<{ status: string; lease_epoch: string }[]>`
      select status, lease_epoch from sessions where id = ${fence.sessionId}`;
    if (!row || Number(row.lease_epoch) !== fence.epoch) throw new FencedError(fence.sessionId, fence.epoch);
    return row.status === "cancelled";
  }

  /**
   * Counts one model call against `agent.budget.maxModelCalls` before it is made, so that
   * a call cut off by a crash counts too. False when the budget is spent. Fenced.
   *
   * `key` names this reservation: the same reservation sent again (db-rideout.ts, after a
   * lost answer) with the same key finds it stored in `model_call_key` and answers true
   * without counting it again, even when its first try is still running in Postgres (the
   * row lock makes the retry wait, and it reads the row its first try left). One holder
   * reserves one call at a time, so the last key is all there is to remember.
   */
  async reserveModelCall(fence: Fence, max: number, key: string = randomUUID()): Promise<boolean> {
    const [row] = await this.database.sql<{ reserved: boolean; fence_ok: boolean }[]>`
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

  /**
   * Starts a queued run in one statement: marks it running and appends what must come
   * first (closed tool calls and the user message, or what the resume kind requires) —
   * both or neither. Returns null when the run was not queued any more.
   */
  async startRun(
    fence: Fence,
    cursor: HistoryCursor,
    run: { id: string; workerId: string; resumeKind: string | null },
    messages: readonly Message[],
    tail: TailState,
  ): Promise<StoredMessage[] | null> {
    const rows = toNewRows(messages, cursor.lastSeq, cursor.lastStepSeq);
    // The session row is locked before the run's (an uncorrelated `exists` is evaluated before
    // the update scans), the order a cancel uses (batches.ts): the run's row first, a cancel
    // holding the session and dropping queued runs deadlocked with this start, and Postgres
    // aborted one of them — the cancel answered 500, or the start failed the worker's job.
    const [result] = await this.database.sql<{ fence_ok: boolean; started: number; inserted: Inserted[] }[]>`
      with cur as (
        select id from sessions where id = ${fence.sessionId} and lease_epoch = ${fence.epoch}
           and last_seq = ${cursor.lastSeq} for no key update
      ), r as (
        update runs set status = 'running', started_at = now(), worker_id = ${run.workerId},
                        resume_kind = ${run.resumeKind}
         where id = ${run.id} and (status = 'queued') is true and exists (select 1 from cur)
        returning id
      ), s as (
        update sessions
           set last_seq = ${cursor.lastSeq + rows.length}, tail_state = ${tail}, run_started = true,
               last_active_at = now(), updated_at = now()
         where id = ${fence.sessionId} and lease_epoch = ${fence.epoch} and last_seq = ${cursor.lastSeq}
           and exists (select 1 from r)
        returning id
      ), ins as (
        insert into messages (session_id, seq, role, content, tool_calls, tool_call_id, call_seq, name, success, stop_reason, usage, provider_state, run_id)
        select s.id, m.seq, m.role, m.content, m.tool_calls, m.tool_call_id, m.call_seq, m.name, m.success, m.stop_reason, m.usage, m.provider_state, ${run.id}
          from s cross join jsonb_to_recordset(${JSON.stringify(rows)}::jsonb) as m(
          seq int, role text, content text, tool_calls jsonb, tool_call_id text, call_seq int,
          name text, success boolean, stop_reason text, usage jsonb, provider_state jsonb)
        returning seq, created_at
      )
      select exists (select 1 from sessions where id = ${fence.sessionId} and lease_epoch = ${fence.epoch}
                       and last_seq = ${cursor.lastSeq}) as fence_ok,
             (select count(*)::int from r) as started,
             (select coalesce(json_agg(json_build_object('seq', seq, 'created_at', created_at)), '[]'::json) from ins)
               as inserted`;
    if (!result!.fence_ok) throw new FencedError(fence.sessionId, fence.epoch);
    if (result!.started === 0) return null;
    return stored(messages, json<Inserted[]>(result!.inserted));
  }

  /**
   * Records how a run ended and returns the session's next queued run, in one statement.
   * Fenced: a worker that lost the lease cannot rewrite a run. A completed run also resets
   * the session's count of automatic resume attempts.
   */
  async endRun(
    fence: Fence,
    runId: string,
    outcome: string,
    detail: {
      error?: string | null;
      usage?: Usage | null;
      /** Park the session in the same statement (a limit was reached), unless more runs wait. */
      park?: { reason: string; detail?: string };
    } = {},
  ): Promise<RunRow | null> {
    const park = parkedReason(detail.park);
    // One update of the session row (a statement cannot update a row twice): the run's end
    // is activity (`updated_at`), a completed run resets the resume count, a limit parks it.
    const [result] = await this.database.sql<{ fence_ok: boolean; next: RawRun | null }[]>`
      with r as (
        update runs set status = 'ended', ended_reason = ${outcome}, ended_at = now(),
                        error = ${detail.error == null ? null : stripNul(detail.error)},
                        usage = ${detail.usage ? JSON.stringify(detail.usage) : null}::jsonb
         where id = ${runId} and (status <> 'ended') is true
           and exists (select 1 from sessions where id = ${fence.sessionId} and lease_epoch = ${fence.epoch})
        returning id
      ), s as (
        update sessions
           set updated_at = now(),
               resume_attempts = case when ${outcome === "completed"} then 0 else resume_attempts end,
               next_resume_at = case when ${outcome === "completed"} then null else next_resume_at end,
               status = case when ${park !== null} and status = 'active'
                               and not exists (select 1 from runs q where q.session_id = ${fence.sessionId}
                                                 and q.status = (select 'queued'::text) and q.id <> ${runId})
                             then 'parked' else status end,
               parked_reason = case when ${park !== null} and status = 'active'
                               and not exists (select 1 from runs q where q.session_id = ${fence.sessionId}
                                                 and q.status = (select 'queued'::text) and q.id <> ${runId})
                             then ${park} else parked_reason end
         where id = ${fence.sessionId} and lease_epoch = ${fence.epoch} and exists (select 1 from r)
        returning status
      )
      select exists (select 1 from sessions where id = ${fence.sessionId} and lease_epoch = ${fence.epoch}) as fence_ok,
             (select row_to_json(q) from runs q where q.session_id = ${fence.sessionId} and q.status = (select 'queued'::text)
                and q.id <> ${runId}
                and coalesce((select status from s),
                             (select status from sessions x where x.id = ${fence.sessionId})) = 'active'
               order by q.queue_seq limit 1) as next`;
    if (!result!.fence_ok) throw new FencedError(fence.sessionId, fence.epoch);
    return result!.next ? runFromRaw(json<RawRun>(result!.next)) : null;
  }

  /**
   * Appends a run's last message and records how the run ended, in one statement: the
   * message is committed with the run's end, both or neither (the agent loop hands its last
   * step here instead of appending it on its own). Fenced on the epoch and `last_seq` like
   * `append`; the session's bookkeeping of `endRun` (the resume count reset after a
   * completed run, parking) is folded into the same session update. Returns the stored
   * message and the session's next queued run.
   */
  async appendAndEndRun(
    fence: Fence,
    cursor: HistoryCursor,
    runId: string,
    last: { message: Message; tail: TailState; estimatedTokens?: number },
    outcome: string,
    detail: { error?: string | null; usage?: Usage | null; park?: { reason: string; detail?: string } } = {},
  ): Promise<{ stored: StoredMessage[]; next: RunRow | null; sessionEvents?: boolean }> {
    const messages = [last.message];
    const answer = await this.endingAppends.call(
      withFields(sessionAppend(fence, cursor, runId, messages, last.tail, last.estimatedTokens ?? 0), {
        runId,
        outcome,
        error: detail.error == null ? null : stripNul(detail.error),
        usage: detail.usage ?? null,
        park: parkedReason(detail.park),
      }),
    );
    if ("error" in answer) throw answer.error;
    const { fenceOk, inserted, next, sessionEvents } = answer.outcome;
    if (!fenceOk) throw new FencedError(fence.sessionId, fence.epoch);
    return {
      stored: stored(messages, inserted),
      next: next ? runFromRaw(next) : null,
      ...(sessionEvents === null ? {} : { sessionEvents }),
    };
  }
}
