/**
 * Every write a worker makes to a session, each fenced by the lease epoch inside the same
 * statement: a worker that lost its lease changes nothing and learns it from a FencedError.
 * Each operation is one round trip (data-modifying CTEs), because these statements are the
 * worker's hot path. See fleet-design.md §4.
 *
 * FencedWrites is the one entry point: claims and appends are sent here, grouped per
 * event-loop turn; starting and ending a run are fenced-runs.ts, the checks a holder makes
 * before it acts fence-checks.ts, and what goes into and comes out of the statements
 * (computed without Postgres) fenced-rows.ts.
 */
import type { Database } from "../db/client.js";
import type { RunRow } from "../db/schema.js";
import { FencedError } from "../errors.js";
import type { Message, StoredMessage, Usage } from "../messages.js";
import type { TailState } from "../tail-state.js";
import { TurnBatch } from "../turn-batch.js";
import { withFields } from "../with-fields.js";
import { countBilledTokens } from "./billed-tokens.js";
import { findCommitted } from "./committed-appends.js";
import { holdsEpoch, reserveModelCall, sessionCancelled } from "./fence-checks.js";
import {
  type Fence,
  type HistoryCursor,
  parkedReason,
  sessionAppend,
  stored,
  stripNul,
} from "./fenced-rows.js";
import { endRun, type RunEnd, type RunEndDetail, recordRunFailure, startRun } from "./fenced-runs.js";
import { GroupCommit, type Settled } from "./group-commit.js";
import {
  type AppendOutcome,
  appendsTogether,
  type EndingAppend,
  type EndingOutcome,
  endingAppendsTogether,
  type SessionAppend,
} from "./grouped-appends.js";
import { runFromRaw } from "./rows.js";
import { type Claim, type ClaimOptions, SessionClaims } from "./session-claims.js";
import { appendAlone, endingAppendAlone } from "./single-appends.js";

export type { Fence, HistoryCursor } from "./fenced-rows.js";
export type { Claim } from "./session-claims.js";

export class FencedWrites {
  /** The appends of one event-loop turn, in one statement per kind (group-commit.ts). */
  private readonly appends: TurnBatch<SessionAppend, Settled<AppendOutcome>>;
  private readonly endingAppends: TurnBatch<EndingAppend, Settled<EndingOutcome>>;
  /** The claims of one event-loop turn (a worker's start ramp), in one statement (session-claims.ts). */
  private readonly claims: SessionClaims;

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
    this.claims = new SessionClaims(database, group, gather);
  }

  /**
   * Takes a session for a new lease holder, in one statement: its epoch bumped, runs an
   * earlier holder left running ended, its agent, next queued run and history read (and with
   * `startFirst`, that run started when it can be). Null for an unknown session (session-claims.ts).
   */
  claimSession(sessionId: string, workerId: string, options: ClaimOptions = {}): Promise<Claim | null> {
    return this.claims.claim(sessionId, workerId, options);
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
     * usage (an estimate: usage.ts); reported usage is counted from the messages. Less, when
     * negative, the tokens of failed attempts the step holds that were counted as they failed
     * (`countBilledTokens`): the session's count never goes down for it.
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

  /** Whether an append that failed on a lost connection committed after all (committed-appends.ts). Fenced. */
  findCommitted(
    fence: Fence,
    cursor: HistoryCursor,
    runId: string | null,
    messages: readonly Message[],
  ): Promise<{ stored: StoredMessage[]; cancelled: boolean; sessionEvents: boolean } | null> {
    return findCommitted(this.database, fence, cursor, runId, messages);
  }

  /** Whether the session's epoch is still `fence.epoch` (fence-checks.ts). */
  holdsEpoch(fence: Fence): Promise<boolean> {
    return holdsEpoch(this.database, fence);
  }

  /** Whether the session was cancelled: asked right before a tool starts (fence-checks.ts). Fenced. */
  sessionCancelled(fence: Fence, runId?: string): Promise<boolean> {
    return sessionCancelled(this.database, fence, runId);
  }

  /** Counts one model call against `agent.budget.maxModelCalls` before it is made, once per `key` (fence-checks.ts). */
  reserveModelCall(fence: Fence, max: number, key?: string): Promise<boolean> {
    return reserveModelCall(this.database, fence, max, key);
  }

  /**
   * Adds the tokens a failed model attempt was billed for to the session's count as it fails,
   * once per `key` (billed-tokens.ts). Fenced.
   */
  countBilledTokens(fence: Fence, tokens: number, key?: string): Promise<void> {
    return countBilledTokens(this.database, fence, tokens, key);
  }

  /** Starts a queued run, appending what must come first, in one statement (fenced-runs.ts). */
  startRun(
    fence: Fence,
    cursor: HistoryCursor,
    run: { id: string; workerId: string; resumeKind: string | null },
    messages: readonly Message[],
    tail: TailState,
  ): Promise<StoredMessage[] | null> {
    return startRun(this.database, fence, cursor, run, messages, tail);
  }

  /**
   * Records how a run ended and returns the session's next queued run, in one statement
   * (fenced-runs.ts); `cancelled`: a cancel committed while the run was running, so it was
   * ended `cancelled` instead of `outcome` (contracts §9).
   */
  endRun(fence: Fence, runId: string, outcome: string, detail: RunEndDetail = {}): Promise<RunEnd> {
    return endRun(this.database, fence, runId, outcome, detail);
  }

  /**
   * Writes why a running run's job failed as its `error`, the run left `running` for its next
   * claim or the sweeper to end (fenced-runs.ts). Fenced; false when nothing was written.
   */
  recordRunFailure(fence: Fence, runId: string, error: string): Promise<boolean> {
    return recordRunFailure(this.database, fence, runId, error);
  }

  /**
   * Appends a run's last message and records how the run ended, in one statement: the
   * message is committed with the run's end, both or neither (the agent loop hands its last
   * step here instead of appending it on its own). Fenced on the epoch and `last_seq` like
   * `append`; the session's bookkeeping of `endRun` (the resume count reset after a
   * completed run, parking) is folded into the same session update. Returns the stored
   * message and the session's next queued run; `cancelled`: a cancel committed while the run
   * was running (its signal lost, or come after the model answered), so the run was ended
   * `cancelled` instead of `outcome` (contracts §9), its last message kept.
   */
  async appendAndEndRun(
    fence: Fence,
    cursor: HistoryCursor,
    runId: string,
    last: { message: Message; tail: TailState; estimatedTokens?: number },
    outcome: string,
    detail: { error?: string | null; usage?: Usage | null; park?: { reason: string; detail?: string } } = {},
  ): Promise<{ stored: StoredMessage[]; next: RunRow | null; cancelled: boolean; sessionEvents?: boolean }> {
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
    const { fenceOk, cancelled, inserted, next, sessionEvents } = answer.outcome;
    if (!fenceOk) throw new FencedError(fence.sessionId, fence.epoch);
    return {
      stored: stored(messages, inserted),
      next: next ? runFromRaw(next) : null,
      cancelled,
      ...(sessionEvents === null ? {} : { sessionEvents }),
    };
  }
}
