/**
 * The one typed catalogue of queues and jobs: names, payload schemas (validated by the
 * producer and again by the worker), deterministic job ids, retry settings.
 */
import { type ConnectionOptions, Queue } from "bullmq";
import { z } from "zod";
import { ValidationError } from "./errors.js";
import { toValidationError } from "./messages.js";

export const runJobSchema = z.strictObject({
  sessionId: z.string().min(1),
  runId: z.string().min(1),
});
export type RunJob = z.infer<typeof runJobSchema>;

export const JOB_NAMES = ["run", "resume"] as const;
export type JobName = (typeof JOB_NAMES)[number];

export const QUEUES = {
  runs: {
    name: "runs",
    jobs: { run: runJobSchema, resume: runJobSchema },
    jobId: (payload: RunJob) => `run-${payload.runId}`,
    defaultJobOptions: {
      // Infrastructure faults (Postgres or Redis blips) are retried; bad input never is
      // (the worker throws UnrecoverableError for it).
      attempts: 5,
      backoff: { type: "exponential", delay: 500 },
      removeOnComplete: { age: 3_600, count: 10_000 },
      removeOnFail: { age: 7 * 24 * 3_600 },
    },
  },
} as const;

export function parseRunJob(name: string, data: unknown): { name: JobName; payload: RunJob } {
  if (!(JOB_NAMES as readonly string[]).includes(name)) {
    throw new ValidationError("job.name", `unknown job "${name}"; expected one of ${JOB_NAMES.join(", ")}`);
  }
  const result = runJobSchema.safeParse(data);
  if (!result.success) throw toValidationError("job.data", result.error);
  return { name: name as JobName, payload: result.data };
}

export function createRunsQueue(connection: ConnectionOptions, prefix: string): Queue {
  const queue = new Queue(QUEUES.runs.name, {
    connection,
    prefix,
    defaultJobOptions: QUEUES.runs.defaultJobOptions,
  });
  // Connection errors surface on the calls that fail (and Redis is retried); don't crash or spam.
  queue.on("error", () => {});
  return queue;
}

/**
 * Resumes go ahead of new work: a job without a priority is taken before every job with
 * one (BullMQ), so new runs carry one and resumes do not. A session interrupted by a crash
 * comes back within a second even when thousands of first runs are queued.
 */
export const NEW_WORK_PRIORITY = 10;

function jobOptions(name: JobName, jobId: string, delayMs = 0) {
  return {
    jobId,
    ...(name === "run" ? { priority: NEW_WORK_PRIORITY } : {}),
    ...(delayMs > 0 ? { delay: Math.ceil(delayMs) } : {}),
  };
}

/** Enqueues a run's job (validated, deterministic id: a second call adds nothing). */
export async function enqueueRun(
  queue: Queue,
  name: JobName,
  payload: RunJob,
  options: { delayMs?: number; jobId?: string } = {},
): Promise<string> {
  const { payload: valid } = parseRunJob(name, payload);
  const jobId = options.jobId ?? QUEUES.runs.jobId(valid);
  await queue.add(name, valid, jobOptions(name, jobId, options.delayMs));
  return jobId;
}

/** Enqueues many runs' jobs in one round trip (validated, deterministic ids). */
export async function enqueueRuns(queue: Queue, jobs: { name: JobName; payload: RunJob }[]): Promise<void> {
  if (jobs.length === 0) return;
  await queue.addBulk(
    jobs.map(({ name, payload }) => {
      const valid = parseRunJob(name, payload).payload;
      return { name, data: valid, opts: jobOptions(name, QUEUES.runs.jobId(valid)) };
    }),
  );
}
