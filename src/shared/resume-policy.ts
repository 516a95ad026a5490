/**
 * The decision for one interrupted session (pure): resume it (when, with which model), park
 * it with a reason, or leave it. Bounded attempts with exponential backoff; fallback models
 * once the primary has failed `fallbackAfter` times.
 */
import type { ModelConfig, ResumeSettings } from "./agent-config.js";
import type { Message, StoredMessage } from "./messages.js";
import { assertNever, type ResumeKind, type ResumePoint, resumePoint } from "./resume-point.js";

export type ResumePolicy = {
  /** Automatic resumes before a session is parked (`attempts_exhausted`). Default 5. */
  maxAttempts: number;
  /** Wait before the second automatic attempt; doubles each time. Default 1 s. */
  backoffBaseMs: number;
  /** Cap on that wait. Default 60 s. */
  backoffMaxMs: number;
  /** Attempts with the primary model before the agent's fallbackModels are used. Default 2. */
  fallbackAfter: number;
  /**
   * Hand-overs by a worker that stopped gracefully (`ResumeInput.handover`) that one request may
   * have without counting them as attempts: past it a hand-over counts like a crash. Default 20,
   * `HANDOVERS_PER_ATTEMPT` times `maxAttempts`.
   */
  maxHandovers: number;
};

/** How many more graceful hand-overs than crashes a request may have before they count as attempts. */
export const HANDOVERS_PER_ATTEMPT = 4;

export const DEFAULT_RESUME_POLICY: ResumePolicy = {
  maxAttempts: 5,
  backoffBaseMs: 1_000,
  backoffMaxMs: 60_000,
  fallbackAfter: 2,
  maxHandovers: 5 * HANDOVERS_PER_ATTEMPT,
};

/** The policy of a fleet's configuration (SWEEPER_MAX_ATTEMPTS, SWEEPER_BACKOFF_MS). */
export function resumePolicyOf(config: {
  sweeperMaxAttempts: number;
  sweeperBackoffMs: number;
}): ResumePolicy {
  return {
    ...DEFAULT_RESUME_POLICY,
    maxAttempts: config.sweeperMaxAttempts,
    backoffBaseMs: config.sweeperBackoffMs,
    maxHandovers: config.sweeperMaxAttempts * HANDOVERS_PER_ATTEMPT,
  };
}

export const PARK_REASONS = [
  "refused",
  "context_full",
  "unknown_stop",
  "malformed",
  "attempts_exhausted",
  "max_output",
  "paused",
  "invalid_agent",
  "max_turns",
  "budget_exhausted",
  "storage_rejected",
  // The provider refused the agent's own model in a way it would repeat, and the agent has
  // no fallback model (session-job.ts `rejectedForGood`).
  "provider_rejected",
] as const;
export type ParkReason = (typeof PARK_REASONS)[number];

export type SweepDecision =
  | {
      action: "resume";
      kind: ResumeKind;
      model?: ModelConfig;
      /** This resume's number in the count of resumes without progress (1 = first). */
      attempt: number;
      /** When it may start: now, or when the backoff of the previous attempt has passed. */
      runAt: Date;
      /** The earliest start of the attempt after this one. */
      nextResumeAt: Date;
      /**
       * For a hand-over by a stopping worker: `free` when it did not count as an attempt
       * (`attempt` is then the count it found), `counted` past `maxHandovers`.
       */
      handover?: "free" | "counted";
    }
  | { action: "park"; reason: ParkReason; detail?: string }
  | { action: "none" };

export function resumeBackoffMs(policy: ResumePolicy, attempt: number): number {
  return Math.min(policy.backoffBaseMs * 2 ** Math.max(0, attempt - 1), policy.backoffMaxMs);
}

export function fallbackModel(
  agent: ResumeSettings,
  attempts: number,
  policy: ResumePolicy,
): ModelConfig | undefined {
  const fallbacks = agent.fallbackModels ?? [];
  if (fallbacks.length === 0 || attempts < policy.fallbackAfter) return undefined;
  return fallbacks[(attempts - policy.fallbackAfter) % fallbacks.length];
}

/**
 * Where a session stands, as far as a resume is concerned: the resume point, and for
 * `recover_tools` the calls left unanswered (by name and arguments, not by id, since a
 * model asks again under new ids), for `call_model` the message it would answer. Two equal
 * marks mean the session is stuck at the same place: a resume that leads back to it made
 * no progress, even if it appended messages on the way (a poison tool that kills every
 * worker that runs it, after the calls before it ran once more).
 */
export function progressMark(history: readonly Message[]): string {
  const point = resumePoint(history);
  if (!point.resumable) return `stop:${point.reason}`;
  switch (point.kind) {
    case "recover_tools":
      return `recover_tools:${JSON.stringify(point.unansweredToolCalls.map((c) => [c.name, c.arguments]))}`;
    case "call_model": {
      const last = history.at(-1);
      return `call_model:${point.cause}:${JSON.stringify([last?.role, last?.content])}`;
    }
    case "retry_response":
    case "continue_response":
      return point.kind;
    default:
      return assertNever(point);
  }
}

export type ResumeInput = {
  point: ResumePoint;
  agent: ResumeSettings;
  /** Automatic resumes since the count last started. */
  attempts: number;
  /** Whether the session progressed since then (store/resume-stand.ts `readStand`). */
  progressed: boolean;
  /**
   * Automatic `continue_response` resumes since the latest run someone asked for started (a new
   * message, or a resume by the API): at `agent.maxTurns` the session is parked `max_turns`, so
   * a model that keeps filling its output limit is bounded even while each part says something.
   */
  continuations?: number;
  /**
   * Automatic resumes of any kind since the latest run someone asked for started: at
   * `agent.maxTurns` the session is parked `max_turns`. A resume that made progress starts the
   * attempt count again (§12), so a model that has a tool run before each failure — the tool's
   * result new each time — was resumed for ever; this bounds one request's automatic resumes as
   * `maxTurns` bounds one run's model calls.
   */
  automaticResumes?: number;
  /**
   * The session's last run was ended by its worker's graceful stop (SIGTERM past the grace
   * period, a deploy), which handed the session over (run-outcomes.ts WORKER_STOPPED_ERROR):
   * not the session's fault, so it is resumed at once without counting an attempt, up to
   * `policy.maxHandovers` hand-overs since the latest run someone asked for (`handovers`, this
   * one included); past that it counts like a crash, so that stops can never loop unbounded.
   */
  handover?: boolean;
  handovers?: number;
  /** The earliest start the previous attempt's backoff allows (null: none). */
  nextResumeAt: Date | null;
  /** How the session's last run ended, for the parking detail. */
  lastOutcome: string | null;
  /**
   * The last run's own model (the agent's primary) was refused by its provider in a way it
   * would repeat (a 401/403, an unknown model): the agent's fallback models are used at once,
   * this resume counting as the `fallbackAfter` attempts the primary would have taken
   * (while leaving at least this one).
   */
  primaryRejected?: boolean;
  /**
   * The model a caller's resume named (`POST …/resume {model}`), when that resume is the
   * request being resumed (no run with new input came after it): resume-semantics §4, a resume
   * is given the model the interrupted request used. It stands in for the agent's primary until
   * the agent's fallback models take over.
   */
  askedModel?: ModelConfig;
  now: Date;
  policy: ResumePolicy;
};

/**
 * Whether a step that hit the output limit stored new text since the last counted attempt
 * (`attemptSeq`): the history ends with that step, it came after the attempt point, and it
 * holds more than whitespace. Continuing it is progress — the answer grew — though the
 * session is back at `continue_response` (`progressMark` is the same); a step that added
 * nothing is not, so a model that keeps returning empty cut answers is parked.
 */
export function continuedWithText(history: readonly StoredMessage[], attemptSeq: number): boolean {
  const last = history.at(-1);
  return (
    last?.role === "assistant" &&
    last.stopReason === "max_output" &&
    last.seq > attemptSeq &&
    last.content.trim() !== ""
  );
}

/** Whether a hand-over by a stopping worker is free of the attempt count, or counted (undefined: no hand-over). */
function handoverBudget(input: ResumeInput): "free" | "counted" | undefined {
  if (input.handover !== true) return undefined;
  return (input.handovers ?? 1) <= input.policy.maxHandovers ? "free" : "counted";
}

/**
 * Every automatic resume — the sweeper's, a worker's, after a job retried by the queue —
 * is decided here, against one per-session count (contracts.md §12): a resume that moved
 * the session to another point starts the count again; one that ends at the same point does not
 * (except a continuation that stored new text, `continuedWithText`, bounded by `maxTurns`
 * instead), so a session whose runs keep failing at one point is parked with its reason. A
 * hand-over by a worker that stopped gracefully counts no attempt, up to `maxHandovers`.
 */
export function decideResume(input: ResumeInput): SweepDecision {
  const { point, agent, policy, now } = input;
  if (!point.resumable) {
    switch (point.reason) {
      case "completed":
      case "empty":
        return { action: "none" };
      case "refused":
      case "context_full":
      case "unknown_stop":
      case "malformed":
        return { action: "park", reason: point.reason, detail: point.detail };
      default:
        return assertNever(point.reason);
    }
  }
  // The agent's word on a stop applies to a run that ended at that stop. A run that died after
  // storing the step (a paused step below the pause limit, continued by the loop; a step stored
  // before the run's end) ended `crashed` or `stalled`: it is resumed like any crash.
  const endedAt = (stop: string) => input.lastOutcome === null || input.lastOutcome === stop;
  if (point.kind === "continue_response" && !agent.continueOnMaxOutput && endedAt("max_output"))
    return { action: "park", reason: "max_output" };
  if (
    point.kind === "call_model" &&
    point.cause === "paused" &&
    !agent.continueOnPause &&
    endedAt("paused")
  ) {
    return { action: "park", reason: "paused" };
  }
  const continuations = input.continuations ?? 0;
  if (point.kind === "continue_response" && continuations >= agent.maxTurns)
    return {
      action: "park",
      reason: "max_turns",
      detail: `${continuations} automatic continuations of a response cut by the output limit (maxTurns ${agent.maxTurns})`,
    };
  const automaticResumes = input.automaticResumes ?? 0;
  if (automaticResumes >= agent.maxTurns)
    return {
      action: "park",
      reason: "max_turns",
      detail: `${automaticResumes} automatic resumes since the latest run asked for (maxTurns ${agent.maxTurns})`,
    };
  const attempts = input.progressed ? 0 : input.attempts;
  const handover = handoverBudget(input);
  if (handover === "free") {
    // A deploy cut the run: the next worker goes on at once, and the count (and its backoff)
    // stays where the crashes left it. `maxTurns` above still bounds it with every other resume.
    return {
      action: "resume",
      kind: point.kind,
      model: fallbackModel(agent, attempts, policy) ?? input.askedModel,
      attempt: attempts,
      runAt: now,
      nextResumeAt: input.nextResumeAt ?? now,
      handover,
    };
  }
  if (attempts >= policy.maxAttempts) {
    const last = input.lastOutcome ? `; the last run ended ${input.lastOutcome}` : "";
    const stops = handover ? `, past ${input.handovers ?? 0} hand-overs by stopping workers` : "";
    return {
      action: "park",
      reason: "attempts_exhausted",
      detail: `${attempts} automatic resumes made no progress${last}${stops}`,
    };
  }
  const toFallback = input.primaryRejected === true && (agent.fallbackModels ?? []).length > 0;
  const counted = toFallback
    ? Math.min(Math.max(attempts, policy.fallbackAfter), policy.maxAttempts - 1)
    : attempts;
  const attempt = counted + 1;
  const waitUntil = attempts > 0 && input.nextResumeAt ? input.nextResumeAt.getTime() : 0;
  const runAt = new Date(Math.max(now.getTime(), waitUntil));
  return {
    action: "resume",
    kind: point.kind,
    model:
      fallbackModel(agent, toFallback ? Math.max(counted, policy.fallbackAfter) : attempts, policy) ??
      input.askedModel,
    attempt,
    runAt,
    nextResumeAt: new Date(runAt.getTime() + resumeBackoffMs(policy, attempt)),
    ...(handover ? { handover } : {}),
  };
}
