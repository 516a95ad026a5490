/**
 * The clock of `fleet_crash_to_resume_seconds` (contracts §6) (pure): from an interrupted run's
 * last sign of life to its resume's start, without the backoff the resume waits on purpose.
 */

/**
 * Where `fleet_crash_to_resume_seconds` starts for an automatic resume (stored as the run's
 * `last_sign_at`, observed by the worker that starts it): the interrupted run's last sign of
 * life, moved later by `waitMs`, the backoff the resume waits on purpose (from the decision to
 * its `runAt`). The metric so measures the time the fleet took to notice the crash and start
 * the resume, not the wait it chose: a crash loop being backed off (2nd and later attempts,
 * up to SWEEPER_BACKOFF_MS × 2^n) does not read as slow resumes (`FleetCrashToResumeSlow`).
 */
export function crashClockStart(lastSignAt: Date | undefined, waitMs: number): Date | undefined {
  return lastSignAt && new Date(lastSignAt.getTime() + Math.max(0, waitMs));
}

/**
 * An interrupted run's last sign of life (pure): the later of its session's last append or
 * claim (Postgres) and its holder's last lease renewal (Redis, ms; null: none recorded).
 * Undefined when neither is known. The sweeper and a worker whose claim found the run both
 * time its resume from it.
 */
export function lastSignOf(lastActiveAt: Date | undefined, lastRenewal: number | null): Date | undefined {
  if (!lastActiveAt && lastRenewal === null) return undefined;
  return new Date(Math.max(lastActiveAt?.getTime() ?? 0, lastRenewal ?? 0));
}

/** What the worker that starts such a resume observes, in seconds (never below 0). */
export function crashToResumeSeconds(signAt: Date, startedAtMs: number): number {
  return Math.max(0, startedAtMs - signAt.getTime()) / 1000;
}
