/**
 * How a run ended: `runs.ended_reason` and the `outcome` label of `fleet_runs_total`. Here,
 * in shared code, because every role ends runs or counts them: the worker (every outcome),
 * the sweeper (`crashed`, `stalled`) and the metrics, which start each outcome's series at 0.
 */
export const RUN_OUTCOMES = [
  "completed",
  "max_turns",
  "interrupted",
  "max_output",
  "paused",
  "refused",
  "context_full",
  "unknown_stop",
  "provider_error",
  "cancelled",
  "fenced",
  "crashed",
  // The sweeper's word for a run whose worker is alive but froze (its session lease expired).
  "stalled",
  "nothing_to_resume",
  "malformed",
  "failed",
  // Limits and bad configuration (contracts §12): the session is parked at once, never
  // resumed automatically.
  "invalid_agent",
  "budget_exhausted",
  "storage_rejected",
] as const;
export type RunOutcome = (typeof RUN_OUTCOMES)[number];

/**
 * How the stored error (`runs.error`) of a run starts when the provider refused the agent's
 * primary model in a way it would repeat (a 401/403, a model that does not exist: the worker's
 * `primaryRejected`). It is what every scheduler of the next automatic resume reads
 * (store/resume-stand.ts `readStand`), not only the worker that ended the run: the sweeper's scan
 * may see the ended run before that worker asks for the resume on a fallback model, and it then
 * scheduled one on the rejected primary, which failed the same way (one more provider call).
 */
export const PRIMARY_REJECTED_PREFIX = "The provider refused the primary model for good (not retried): ";

/**
 * The stored error (`runs.error`) of a run ended `cancelled` because its worker stopped
 * gracefully (SIGTERM past SHUTDOWN_GRACE_MS, a deploy) and handed the session over: what every
 * scheduler of the next automatic resume reads (store/resume-stand.ts `readStand`) to tell a
 * hand-over from a crash, which it must not count as one (resume-policy.ts `decideResume`).
 */
export const WORKER_STOPPED_ERROR =
  "The worker stopped (a graceful shutdown) while this run was running: the session was handed over to another worker.";
