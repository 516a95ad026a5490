/**
 * BullMQ's Worker, with one addition for a stop that cannot wait for Redis: `stopKeepingAlive()`.
 * BullMQ stops its lock renewal, and closes the blocking connection it made for its fetches,
 * only once its `close()` gets past the jobs under way, which it never does while Redis is
 * away (taskforcesh/bullmq#4656). After `startWorker().stop()` or `startSweeper().stop()` had
 * given up on that close, the renewal timer went on re-arming itself, and a blocking
 * connection that had not connected before Redis went on reconnecting: either kept a program
 * that embeds the worker or the sweeper alive for a minute or more
 * (test/worker-stop-redis-away.test.ts, test/sweeper-stop-redis-away.test.ts).
 *
 * And what a job's processor throws reaches BullMQ as `queueFailure` makes it: BullMQ keeps a
 * failed attempt's message (`failedReason`) and stack (`stacktrace`) on the job's hash in Redis
 * for as long as the job is kept (a failed one: a week), where a key, a prompt or a tool's
 * output the fault quoted stayed readable (test/job-failure-redis.test.ts).
 */
import type { Job, Processor, Worker, WorkerOptions } from "bullmq";
import { bullmq } from "./cjs-packages.js";
import { jobFailureText } from "./failure-text.js";

/** Errors BullMQ reads as a word about the job (moved, not failed): passed on as they are. */
const JOB_MOVES: ReadonlySet<string> = new Set([
  "DelayedError",
  "WaitingError",
  "WaitingChildrenError",
  "RateLimitError",
]);

/**
 * What BullMQ is handed for `error` thrown by a processor (pure): an error of the same name
 * (BullMQ and the workers' "failed" handlers read it: UnrecoverableError, WebhookRecordError)
 * whose message is the text a run's `error` gets (its secrets scrubbed, clipped) and with no
 * stack, so BullMQ stores none; a `tenantText` the error carries is kept, said the same way.
 */
export function queueFailure(error: unknown, env: Readonly<Record<string, string | undefined>>): unknown {
  if (error instanceof Error && JOB_MOVES.has(error.name)) return error;
  const failure = new Error(jobFailureText(error, env));
  if (error instanceof Error) failure.name = error.name;
  failure.stack = "";
  // What a tenant reads of the failure, when the processor said it apart (a webhook delivery's
  // attempt: webhook-errors.ts attemptErrorText), scrubbed and clipped the same way.
  const tenantText = (error as { tenantText?: unknown } | null)?.tenantText;
  if (typeof tenantText === "string") Object.assign(failure, { tenantText: jobFailureText(tenantText, env) });
  return failure;
}

export type BullWorker = Worker & {
  /**
   * Stops what this Worker's close would have stopped and what would keep the process alive:
   * the renewal of its jobs' locks, and its blocking connection (closed at once, as BullMQ's
   * forced close does, whether or not it ever connected). Waits for no Redis and for nothing
   * of the close under way; a no-op once that close has ended. For a stop that gave up on it.
   */
  stopKeepingAlive(): Promise<void>;
};

let FleetWorker: (new (name: string, processor: Processor, opts: WorkerOptions) => BullWorker) | undefined;

/** A BullMQ Worker (its class made at the first call: BullMQ loads lazily, cjs-packages.ts). */
export function newBullWorker(name: string, processor: Processor, opts: WorkerOptions): BullWorker {
  FleetWorker ??= class extends bullmq.Worker {
    async stopKeepingAlive(): Promise<void> {
      await this.lockManager.close();
      // BullMQ's forced close: drops the blocking connection without waiting for Redis, or for
      // its first connect when it never connected. Not awaited: had the Worker's own close
      // begun closing its connections, this returns that close, which may wait on Redis. The
      // main connection is the caller's (shared: left open, for the caller to close).
      this.backend.close(true).catch(() => {});
    }
  };
  const failingClean = async (job: Job, token?: string, signal?: AbortSignal) => {
    try {
      return await processor(job, token, signal);
    } catch (error) {
      throw queueFailure(error, process.env);
    }
  };
  // BullMQ hands a signal only to a processor that declares one (its `length`): as before.
  Object.defineProperty(failingClean, "length", { value: processor.length });
  return new FleetWorker(name, failingClean, opts);
}
