/**
 * What a worker logs for a BullMQ Worker's `error` event.
 *
 * Some are expected, not faults: a job's lock that is no longer this worker's — Redis restored
 * from a snapshot (its locks belong to no one running), a lock that expired while Redis or the
 * worker stalled, the sweeper's or BullMQ's stalled check handing the job on. BullMQ reports
 * them as errors when the job finishes (`Lock mismatch for job J. Cmd moveToFinished from
 * active`, `Missing lock for job J. …`) or its lock is renewed; the fence in Postgres keeps the
 * history safe (lease.ts). Logged with their stack traces they were noise: 16 multi-line
 * warnings after one Redis restore. So is a job whose key is gone (`Missing key for job J.
 * moveToFinished`): Redis restarted empty under it, and the sweeper resumes its session from
 * Postgres. They are logged as one line each, job and message kept.
 * Anything else is logged with its stack, as a fault.
 */
import type { Logger } from "pino";

const LOCK_LOST =
  /^(Lock mismatch|Missing lock|Missing key) for job (\S+?)\.|could not renew lock for job (\S+)/i;

/** A lost job lock's (or job key's) job id and message, or null for any other error (pure). */
export function lockLost(error: unknown): { jobId: string; err: string } | null {
  if (!(error instanceof Error)) return null;
  const match = LOCK_LOST.exec(error.message);
  if (!match) return null;
  return { jobId: match[2] ?? match[3] ?? "", err: error.message };
}

/** Logs one BullMQ Worker error (after the outage and refusal logs passed on it). */
export function logWorkerError(log: Pick<Logger, "warn">, error: unknown): void {
  const lost = lockLost(error);
  if (lost)
    log.warn(
      lost,
      "a job's BullMQ lock or key was no longer this worker's (the fence keeps the history safe)",
    );
  else log.warn({ err: error }, "worker error");
}
