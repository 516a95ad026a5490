/**
 * What a worker does with each job BullMQ hands it: a run job becomes its session's job
 * (session-job.ts), aborted by the worker's stop or a cancel's signal (running-jobs.ts); a
 * session another worker holds, or a run waiting for its endpoint's capacity, puts the job
 * back in the delayed set; a job of a name this release does not know waits for a newer
 * worker (newer-job-wait.ts).
 */
import type { Job } from "bullmq";
import type { Redis } from "ioredis";
import { bullmq } from "../shared/cjs-packages.js";
import { ValidationError } from "../shared/errors.js";
import { isRunJobName, parseRunJob } from "../shared/queues.js";
import type { UnknownJobs } from "./newer-job-wait.js";
import { putBack } from "./put-back.js";
import type { RunningJobs } from "./running-jobs.js";
import { processSessionJob, type SessionJobDeps } from "./session-job.js";

export type JobProcessorDeps = {
  deps: SessionJobDeps;
  running: RunningJobs;
  unknownJobs: Pick<UnknownJobs, "handle">;
  /** The worker's liveness connection, through which jobs are put back. */
  redis: Redis;
  prefix: string;
};

/** The processor of the worker's BullMQ Workers (queue-workers.ts). */
export function jobProcessor({ deps, running, unknownJobs, redis, prefix }: JobProcessorDeps) {
  return async (job: Job, token?: string, signal?: AbortSignal) => {
    if (!isRunJobName(job.name)) return unknownJobs.handle(job, token);
    let payload: ReturnType<typeof parseRunJob>["payload"];
    try {
      payload = parseRunJob(job.name, job.data).payload;
    } catch (error) {
      // Bad input fails once, clearly, and is never retried.
      if (error instanceof ValidationError) throw new bullmq.UnrecoverableError(error.message);
      throw error;
    }
    const controller = new AbortController();
    const onAbort = () => controller.abort(signal?.reason);
    signal?.addEventListener("abort", onAbort, { once: true });
    if (signal?.aborted) controller.abort(signal.reason);
    const mine = running.start(payload.sessionId, controller);
    let result: Awaited<ReturnType<typeof processSessionJob>>;
    try {
      result = await processSessionJob(payload.sessionId, controller.signal, deps, mine.onRun);
    } finally {
      signal?.removeEventListener("abort", onAbort);
      mine.end();
    }
    if (result === "busy") {
      // Another worker holds the session: wait behind it, never alongside it.
      await putBack(redis, prefix, job, Date.now() + 100 + Math.floor(Math.random() * 200), token);
      throw new bullmq.DelayedError();
    }
    if (typeof result === "object") {
      // A run waits for its endpoint's capacity (contracts §15): the job is handed back to the
      // delayed set (no attempt counted: moveToDelayed skips it) and frees this slot now.
      // It comes back no later than the queue's head (put-back.ts: a renumbering meanwhile).
      await putBack(redis, prefix, job, Date.now() + Math.max(1, result.handedBack), token);
      throw new bullmq.DelayedError();
    }
    return result;
  };
}
