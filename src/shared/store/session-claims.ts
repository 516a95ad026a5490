/**
 * Claiming a session for a new lease holder (FencedWrites.claimSession): the claims of one
 * event-loop turn in one statement (grouped-claims.ts), and what a claim answers.
 */
import type { Database } from "../db/client.js";
import type { RunRow } from "../db/schema.js";
import type { StoredMessage } from "../messages.js";
import type { TailState } from "../tail-state.js";
import { TurnBatch } from "../turn-batch.js";
import { stored } from "./fenced-rows.js";
import { GroupCommit, type Settled } from "./group-commit.js";
import type { Inserted } from "./grouped-appends.js";
import {
  type ClaimRequest,
  type ClaimRow,
  claimAlone,
  claimsTogether,
  type StaleRun,
} from "./grouped-claims.js";
import { readClaimedHistory } from "./history-reads.js";
import { json, messageFromRaw, type RawMessage, type RawRun, runFromRaw } from "./rows.js";

/** What a new lease holder learns when it claims a session. */
export type Claim = {
  epoch: number;
  /** The stored agent configuration (validated by the caller). */
  agent: unknown;
  /** Tokens its model steps used so far, across all runs (for `agent.budget.maxTokens`). */
  tokensUsed: number;
  /** Whether its event stream is written (false: created with `sessionEvents: false`). */
  sessionEvents: boolean;
  /**
   * Runs an earlier holder left `running` (it crashed, froze or was fenced out), now ended
   * `crashed`, or `cancelled` when a cancel had found them running (contracts §9).
   */
  staleRunIds: string[];
  /** The same runs with their kind and how they ended (for `fleet_runs_total{kind,outcome}`). */
  staleRuns: StaleRun[];
  /**
   * With stale runs, their last sign of life in Postgres: the session's last append or claim
   * before this claim (the earlier holder's last lease renewal is in Redis: lease.ts `take`).
   */
  staleSignAt?: Date;
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

/** How a claim is made (`claim`). */
export type ClaimOptions = {
  startFirst?: { tail: TailState };
  /**
   * This session's history as an earlier job of this worker left it (history-cache.ts,
   * history-reads.ts `readClaimedHistory`): a long history is then read only from where
   * it ends, and pushed onto it. The caller must hand over an array no one else uses.
   */
  known?: StoredMessage[];
};

export class SessionClaims {
  /** The claims of one event-loop turn (a worker's start ramp), in one statement. */
  private readonly claims: TurnBatch<ClaimRequest, Settled<ClaimRow>>;

  constructor(
    private readonly database: Database,
    /** FencedWrites's `groupWrites` and `gatherMs`. */
    group: boolean,
    gather: number,
  ) {
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
   * the caller starts the run itself (FencedWrites.startRun). The session row is locked first (the order
   * every writer of this session and its runs uses), so what the start checks is current.
   */
  async claim(sessionId: string, workerId: string, options: ClaimOptions = {}): Promise<Claim | null> {
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
    const staleRuns = json<StaleRun[]>(row.stale);
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
      ...(staleRuns.length > 0 ? { staleSignAt: new Date(row.active_before) } : {}),
      next,
      started: started && next ? stored([{ role: "user", content: next.input ?? "" }], [started]) : null,
      history,
      historyRead: read ? read.read : history.length,
    };
  }
}
