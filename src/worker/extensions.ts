/**
 * Extensions (contracts §8): modules a worker loads (`fleet worker --extensions FILE`) whose
 * hooks run around every run. The rules, enforced here and in session-job.ts:
 * - `beforeRun`: every run and every resume a worker starts, before the first model call; a
 *   throw ends the run `failed` with the hook's message, and nothing is sent to the model;
 *   the later extensions' `beforeRun` still runs (each hears of the failed run). Also a run that ends before it starts (a resume with nothing to resume, first messages
 *   Postgres refused), before its end is written: `beforeRun` and `afterRun` pair (worker
 *   README, "Extensions"); a throw there is logged and counted, the run's end stays.
 * - `onMessage`: only for a run that carries new user input (never on a resume).
 * - `afterRun`: every run a worker ends (`result.outcome` is the run's `endedReason`), for each
 *   extension whose `beforeRun` was called for it (or that has none): a run cancelled before
 *   an extension's `beforeRun` was called ends without its `afterRun` (hook-pairs.ts); a run
 *   handed back for capacity and continued on another worker calls `beforeRun` there first.
 * - `onError`: a run that ends `failed`, `provider_error`, or finds nothing to resume (the
 *   error's `reason` is then the resume point's reason); paired as `afterRun` is.
 * - `onCommitted` (additive): each message the run committed, after its commit.
 * - `onSessionDeleted` (additive): each deleted session, by one worker, at least once
 *   (worker/deletion-hooks.ts).
 * Errors in hooks other than `beforeRun` are logged and counted
 * (`fleet_hook_failures_total{hook}`); they never lose a message or stop a run. Neither does
 * the built-in transcript's `beforeRun` (a resume's turn recorded again): a transcript is a
 * record, not a gate, so a line it cannot write is lost, logged and counted.
 *
 * This file says what an extension is; hook-runner.ts calls the hooks, and
 * transcript-extension.ts is the built-in transcript.
 */
import type { AgentConfig } from "../shared/agent-config.js";
import type { StoredMessage } from "../shared/messages.js";

export type RunContext = {
  sessionId: string;
  runId: string;
  kind: "run" | "resume";
  resumeKind: string | null;
  trigger: string;
  agent: AgentConfig | unknown;
  metadata: Record<string, unknown>;
  signal: AbortSignal;
  /** The new user text; null on a resume. */
  inputMessage: string | null;
  /** The stored history before this run appended anything (additive). */
  history: readonly StoredMessage[];
};

export type RunResult = { outcome: string; error?: string };

/** The error `onError` gets: `reason` for a resume that found nothing to resume. */
export class RunError extends Error {
  override name = "RunError";
  constructor(
    message: string,
    readonly outcome: string,
    readonly reason?: string,
  ) {
    super(message);
  }
}

export type CommittedMessage = { runId: string; seq: number; message: StoredMessage };

export type Extension = {
  name: string;
  beforeRun?(ctx: RunContext): unknown;
  onMessage?(ctx: RunContext, input: string): unknown;
  afterRun?(ctx: RunContext, result: RunResult): unknown;
  onError?(ctx: RunContext, error: RunError): unknown;
  onCommitted?(ctx: RunContext, committed: CommittedMessage): unknown;
  /**
   * (Additive) a session was deleted (API or retention): remove what the extension keeps
   * about it. Called by one worker per deleted session, at least once (again if that worker
   * died before it was done).
   */
  onSessionDeleted?(sessionId: string, ctx: DeletedContext): unknown;
};

/** What `onSessionDeleted` is told besides the session's id. */
export type DeletedContext = {
  tenant: string;
  deletedAt: Date;
  /** 1 the first time; more when a worker that was calling the hooks died first. */
  attempt: number;
  /** Aborted when the hook's time (FLEET_HOOK_TIMEOUT_MS) is up or the worker stops. */
  signal: AbortSignal;
};

/** Declares an extension (typed; returns it unchanged). */
export function defineExtension<E extends Extension>(extension: E): E {
  return extension;
}

/** The built-in transcript's name (transcript-extension.ts): no other extension may take it. */
export const TRANSCRIPT_EXTENSION = "transcript";

export type HookName = "beforeRun" | "onMessage" | "afterRun" | "onError";

/** Outcomes after which `onError` runs. */
export const ERROR_OUTCOMES: ReadonlySet<string> = new Set(["failed", "provider_error", "nothing_to_resume"]);
