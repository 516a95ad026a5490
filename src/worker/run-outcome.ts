/** How a run ended (`runs.ended_reason`, the `outcome` label of `fleet_runs_total`): src/shared/run-outcomes.ts. */

import type { RunRow } from "../shared/db/schema.js";
import { RUN_OUTCOMES, type RunOutcome } from "../shared/run-outcomes.js";
import { isKnownStopReason } from "../shared/stop-reasons.js";

export { RUN_OUTCOMES, type RunOutcome };

/** The reason a stopping worker aborts its running jobs with, past its grace period (queue-workers.ts). */
export const WORKER_STOP_REASON = "worker shutting down";

/**
 * Whether a run that ended `cancelled` was cut by its worker's graceful stop, not by a cancel
 * or a lost lease (pure): its session is handed over, which is no crash (run-outcomes.ts
 * WORKER_STOPPED_ERROR). The job's signal carries the stop's reason from BullMQ's
 * `cancelAllJobs` (job-processor.ts, session-job.ts pass it on).
 */
export function stoppedByWorker(outcome: RunOutcome, signal: AbortSignal): boolean {
  return outcome === "cancelled" && signal.aborted && signal.reason === WORKER_STOP_REASON;
}

/**
 * The outcome of a step that asked for no tools. `paused` is continued by the loop until
 * the pause limit; every other abnormal stop ends the run so that a resume can follow.
 */
export function outcomeOfStop(stopReason: string): RunOutcome {
  if (!isKnownStopReason(stopReason)) return "unknown_stop";
  switch (stopReason) {
    case "end_turn":
    case "tool_use":
      return "completed";
    case "paused":
      return "paused";
    case "interrupted":
      return "interrupted";
    case "max_output":
      return "max_output";
    case "refusal":
      return "refused";
    case "context_full":
      return "context_full";
    default: {
      const never: never = stopReason;
      return never;
    }
  }
}

/**
 * Outcomes that park the session in the statement that ends the run (contracts §12): a
 * limit was reached or the run can never succeed as configured; an automatic resume would
 * only repeat it. An explicit resume or a new message continues the session.
 */
export const PARK_AT_ONCE: ReadonlySet<RunOutcome> = new Set<RunOutcome>([
  "max_turns",
  "budget_exhausted",
  "invalid_agent",
  "storage_rejected",
]);

/** Outcomes after which the session still needs a resume (or parking) by a sweeper. */
export const NEEDS_SWEEPER: ReadonlySet<RunOutcome> = new Set<RunOutcome>([
  "interrupted",
  "max_output",
  "paused",
  "provider_error",
  "refused",
  "context_full",
  "unknown_stop",
  "failed",
]);

/**
 * A write Postgres refused for what it held rather than for being unreachable — SQLSTATE
 * class 22 (data exception), 23 (a constraint, e.g. a second result for one call id) or 54
 * (a limit, e.g. a value too large): retrying would fail the same way every time.
 */
export function storageRejection(error: unknown): "storage_rejected" | null {
  const code = (error as { code?: unknown } | null)?.code;
  return typeof code === "string" && /^(22|23|54)/.test(code) ? "storage_rejected" : null;
}

/** A name Postgres quotes after the kind of object it is: `constraint "runs_pkey"`, `relation "messages"`. */
const SCHEMA_NAME =
  /\b(constraint|index|relation|table|column|type|function|schema|sequence|trigger|view|domain|database|role)\s+"(?:[^"]|"")*"/gi;

/**
 * A refused write's message as the run's error and the parked reason say it, which its tenant
 * reads (pure): Postgres's words without the names of the schema's objects (`violates check
 * constraint "…"`). The worker's "write refused" line logs it whole (`logStorageRejection`).
 */
export function storageRejectionText(error: unknown): string {
  const message = error instanceof Error ? error.message : String(error);
  return message.replace(SCHEMA_NAME, (_named, kind: string) => `${kind} "…"`);
}

/** The operator's line for a refused write: Postgres's message and SQLSTATE whole. */
export function logStorageRejection(
  log: { warn: (fields: object, message: string) => void },
  fields: object,
  error: unknown,
): void {
  log.warn(
    {
      ...fields,
      code: (error as { code?: unknown }).code,
      error: error instanceof Error ? error.message : String(error),
    },
    "write refused by Postgres",
  );
}

/**
 * A run the agent's own model ended with a refusal the provider would repeat (a 401/403, a
 * model that does not exist, a key that is not set: call-model.ts `rejected`), on an agent
 * with no fallback model: no automatic resume can succeed, so the session is parked
 * `provider_rejected` at once, with the provider's message, instead of calling the provider
 * SWEEPER_MAX_ATTEMPTS times more. With fallback models, the worker asks for the resume on
 * the first of them at once (`primaryRejected`). When the run used another model (a fallback,
 * or one a resume asked for), the resume policy goes on as for any provider error.
 */
export function rejectedForGood(
  result: { outcome: RunOutcome; rejected?: true },
  run: RunRow,
  agent: { fallbackModels?: readonly unknown[] | undefined } | null,
): boolean {
  return primaryRefused(result, run) && agent !== null && (agent.fallbackModels ?? []).length === 0;
}

/** The same refusal on an agent with fallback models: the next resume uses one at once. */
export function primaryRejected(
  result: { outcome: RunOutcome; rejected?: true },
  run: RunRow,
  agent: { fallbackModels?: readonly unknown[] | undefined } | null,
): boolean {
  return primaryRefused(result, run) && agent !== null && (agent.fallbackModels ?? []).length > 0;
}

function primaryRefused(result: { outcome: RunOutcome; rejected?: true }, run: RunRow): boolean {
  return result.outcome === "provider_error" && result.rejected === true && run.model === null;
}
