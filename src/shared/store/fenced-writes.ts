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
import { judgeAppend, readAfterCursor } from "./committed-appends.js";
import { holdsEpoch, reserveModelCall, sessionCancelled } from "./fence-checks.js";
import {
  type Fence,
  type HistoryCursor,
  parkedReason,
  sessionAppend,
  stored,
  stripNul,
} from "./fenced-rows.js";
import { endRun, type RunEndDetail, startRun } from "./fenced-runs.js";
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

export type { Fence, HistoryCursor } from "./fenced-rows.js";

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

  /** Records how a run ended and returns the session's next queued run, in one statement (fenced-runs.ts). */
  endRun(fence: Fence, runId: string, outcome: string, detail: RunEndDetail = {}): Promise<RunRow | null> {
    return endRun(this.database, fence, runId, outcome, detail);
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
