/**
 * The one typed catalogue of queues and jobs: names, payload schemas (validated by the
 * producer and again by the worker), deterministic job ids, retry settings.
 *
 * Two queues: `runs` for new work and `resumes` for resumes. Each worker process takes
 * resumes with slots of their own, so a session interrupted by a crash comes back within a
 * second even while every slot for new work is busy and thousands of first runs wait.
 * A third, `webhooks`, holds batch webhook deliveries (contracts §9), run by the sweeper.
 */
import type { ConnectionOptions, Job, Queue } from "bullmq";
import type { Redis } from "ioredis";
import { z } from "zod";
import { bullmq } from "./cjs-packages.js";
import { ValidationError } from "./errors.js";
import { isStorableText, toValidationError, UNSTORABLE_TEXT } from "./messages.js";

/**
 * An id in a job's data: a string Postgres can look up. One holding U+0000 (a job added or
 * edited by hand) made every query with it fail as an outage would, so the job was retried.
 */
const jobId = z.string().min(1).refine(isStorableText, UNSTORABLE_TEXT);

/**
 * A job's data names what it is about; everything else is read from Postgres. Fields a newer
 * release adds to it are ignored (dropped by the parse), not refused: a strict parse failed
 * such a job for good on an older worker during a rolling deploy, and its run waited for a
 * sweeper to queue it again (test/newer-job-payload.test.ts).
 */
export const runJobSchema = z.object({
  sessionId: jobId,
  runId: jobId,
});
export type RunJob = z.infer<typeof runJobSchema>;

export const JOB_NAMES = ["run", "resume"] as const;
export type JobName = (typeof JOB_NAMES)[number];

const defaultJobOptions = {
  // Infrastructure faults (Postgres or Redis blips) are retried; bad input never is
  // (the worker throws UnrecoverableError for it).
  attempts: 5,
  backoff: { type: "exponential", delay: 500 },
  removeOnComplete: { age: 3_600, count: 10_000 },
  removeOnFail: { age: 7 * 24 * 3_600 },
} as const;

/** The job id of a run: one job per run, whichever queue holds it (a second add is a no-op). */
const runJobId = (payload: RunJob) => `run-${payload.runId}`;

/** Fields a newer release adds are ignored, as for runJobSchema. */
export const webhookJobSchema = z.object({
  batchId: jobId,
  /** Attempts begun by the webhook's jobs before this one (lost with Redis): Postgres's count. */
  priorAttempts: z.number().int().min(0).optional(),
  /** When the webhook's delivery was first queued (ms), as Postgres keeps it. */
  firstQueuedAt: z.number().optional(),
});
export type WebhookJob = z.infer<typeof webhookJobSchema>;

/** The backoff type of webhook deliveries: the sweeper's webhook worker computes it. */
export const WEBHOOK_BACKOFF = "webhook";
/**
 * Delivery attempts: with the backoff (1 s doubling up to 1 h, webhook-delivery.ts) 40
 * attempts span more than 24 h before a delivery is given up.
 */
export const WEBHOOK_ATTEMPTS = 40;
/**
 * Times a delivery may be found stalled (its sweeper died during it) and sent again; the next
 * stall gives the webhook up (batch-ends.ts). Each counts as one of its WEBHOOK_ATTEMPTS.
 */
export const WEBHOOK_MAX_STALLS = 3;

export const QUEUES = {
  /** New work: runs with new input. */
  runs: { name: "runs", job: "run", jobId: runJobId, defaultJobOptions },
  /** Resumes, automatic or asked for: taken by slots of their own in every worker. */
  resumes: { name: "resumes", job: "resume", jobId: runJobId, defaultJobOptions },
  /** Batch webhooks: one job per batch (`webhook-<batchId>`), retried until a 2xx. */
  webhooks: {
    name: "webhooks",
    job: "deliver",
    jobId: (payload: WebhookJob) => `webhook-${payload.batchId}`,
    defaultJobOptions: {
      attempts: WEBHOOK_ATTEMPTS,
      backoff: { type: WEBHOOK_BACKOFF },
      removeOnComplete: { age: 24 * 3_600 },
      removeOnFail: { age: 7 * 24 * 3_600 },
    },
  },
} as const;
/** The queues of runs (the webhooks queue is opened by `openWebhookQueue`). */
export type QueueKey = "runs" | "resumes";

/** The webhooks queue of a fleet. */
export function openWebhookQueue(connection: ConnectionOptions, prefix: string): Queue {
  const queue = new bullmq.Queue(QUEUES.webhooks.name, {
    connection,
    prefix,
    defaultJobOptions: QUEUES.webhooks.defaultJobOptions,
  });
  queue.on("error", () => {});
  return queue;
}

/**
 * Queues a batch's webhook delivery (deterministic id: a second call adds nothing), with its
 * `priority` (1 first; BatchStore.webhookPriority) when given.
 */
export async function enqueueWebhook(queue: Queue, payload: WebhookJob, priority?: number): Promise<void> {
  const valid = webhookJobSchema.parse(payload);
  await queue.add(QUEUES.webhooks.job, valid, {
    jobId: QUEUES.webhooks.jobId(valid),
    ...(priority === undefined ? {} : { priority }),
  });
}

/** The queue that holds a job of this name. */
export function queueKeyOf(name: JobName): QueueKey {
  return name === "run" ? "runs" : "resumes";
}

/** Whether a job's name is one this release knows (a newer one may add more: newer-job-wait.ts). */
export function isRunJobName(name: string): name is JobName {
  return (JOB_NAMES as readonly string[]).includes(name);
}

export function parseRunJob(name: string, data: unknown): { name: JobName; payload: RunJob } {
  if (!isRunJobName(name)) {
    throw new ValidationError("job.name", `unknown job "${name}"; expected one of ${JOB_NAMES.join(", ")}`);
  }
  const plain = plainRunJob(data);
  if (plain) return { name: name as JobName, payload: plain };
  const result = runJobSchema.safeParse(data);
  if (!result.success) throw toValidationError("job.data", result.error);
  return { name: name as JobName, payload: result.data };
}

/**
 * The data of a run job as runJobSchema reads it, when it passes (two non-empty, storable
 * ids; other fields dropped), without zod: every job a worker takes is parsed here, and the
 * schema's parse allocated about a kilobyte a job (docs/performance.md, 7 December). null: let
 * the schema parse it, and say what is wrong.
 */
function plainRunJob(data: unknown): RunJob | null {
  if (typeof data !== "object" || data === null || Array.isArray(data)) return null;
  const { sessionId, runId } = data as { sessionId?: unknown; runId?: unknown };
  if (typeof sessionId !== "string" || sessionId === "" || !isStorableText(sessionId)) return null;
  if (typeof runId !== "string" || runId === "" || !isStorableText(runId)) return null;
  return { sessionId, runId };
}

/** Where a run's job stands in Redis (RunQueues.jobStates). */
export type JobStanding = "missing" | "finished" | "pending";

/** Jobs whose standing one script call reads. */
const JOB_STATES_AT_ONCE = 1_000;

// KEYS: [1] the queue's completed set, [2] its failed set, then each job's hash. ARGV: each job's id.
// Returns one letter per job: m(issing), f(inished: completed or failed), p(ending).
const JOB_STATES = `
local out = {}
for i = 1, #ARGV do
  if redis.call('EXISTS', KEYS[i + 2]) == 0 then out[i] = 'm'
  elseif redis.call('ZSCORE', KEYS[1], ARGV[i]) or redis.call('ZSCORE', KEYS[2], ARGV[i]) then out[i] = 'f'
  else out[i] = 'p' end
end
return table.concat(out)`;

/** Both queues of a fleet (FLEET_PREFIX), as producers, the sweeper and workers use them. */
export class RunQueues {
  readonly runs: Queue;
  readonly resumes: Queue;

  constructor(connection: ConnectionOptions, prefix: string) {
    const open = (key: QueueKey) => {
      const queue = new bullmq.Queue(QUEUES[key].name, {
        connection,
        prefix,
        defaultJobOptions: QUEUES[key].defaultJobOptions,
      });
      // Connection errors surface on the calls that fail (and Redis is retried); don't crash or spam.
      queue.on("error", () => {});
      return queue;
    };
    this.runs = open("runs");
    this.resumes = open("resumes");
  }

  /** Both queues, for what applies to each (pause, counts, events). */
  all(): Queue[] {
    return [this.runs, this.resumes];
  }

  /** The queue that holds jobs of this name. */
  of(name: JobName): Queue {
    return this[queueKeyOf(name)];
  }

  /** Enqueues a run's job (validated, deterministic id: a second call adds nothing). */
  async enqueue(
    name: JobName,
    payload: RunJob,
    options: { delayMs?: number; jobId?: string; priority?: number } = {},
  ): Promise<string> {
    const { payload: valid } = parseRunJob(name, payload);
    const jobId = options.jobId ?? runJobId(valid);
    const delay = options.delayMs && options.delayMs > 0 ? Math.ceil(options.delayMs) : undefined;
    await this.of(name).add(name, valid, {
      jobId,
      ...(delay ? { delay } : {}),
      ...(options.priority ? { priority: options.priority } : {}),
    });
    return jobId;
  }

  /**
   * Enqueues many runs' jobs, one round trip per queue (validated, deterministic ids).
   * `priority`: BullMQ's (lower first; fair-dispatch.ts hands them out per tenant).
   */
  async enqueueMany(jobs: { name: JobName; payload: RunJob; priority?: number }[]): Promise<void> {
    for (const key of ["runs", "resumes"] as const) {
      const mine = jobs.filter(({ name }) => queueKeyOf(name) === key);
      if (mine.length === 0) continue;
      await this[key].addBulk(
        mine.map(({ name, payload, priority }) => {
          const valid = parseRunJob(name, payload).payload;
          return { name, data: valid, opts: { jobId: runJobId(valid), ...(priority ? { priority } : {}) } };
        }),
      );
    }
  }

  /** The job of a run, in the queue its name belongs to. */
  getJob(name: JobName, jobId: string): Promise<Job | undefined> {
    return this.of(name).getJob(jobId);
  }

  /**
   * Where each job stands, read by one script call per JOB_STATES_AT_ONCE jobs with O(1)
   * commands per job inside it (BullMQ's own getState scans the wait list, which is long
   * exactly when the sweeper asks about many jobs; a pipeline of three commands per job cost
   * the sweeper 1,500 commands to encode and 1,500 replies to parse for a page of 500):
   * `missing` (Redis has no such job), `finished` (completed or failed), or `pending`
   * (waiting, prioritized, delayed or active). Every key of a queue shares the fleet's hash
   * tag, so the script also runs on a Redis Cluster.
   */
  async jobStates(name: JobName, jobIds: readonly string[]): Promise<JobStanding[]> {
    if (jobIds.length === 0) return [];
    const queue = this.of(name);
    // BullMQ's client is the ioredis connection (or Cluster) it was given.
    const client = (await queue.backend.client) as unknown as Redis;
    const states: JobStanding[] = [];
    for (let from = 0; from < jobIds.length; from += JOB_STATES_AT_ONCE) {
      const ids = jobIds.slice(from, from + JOB_STATES_AT_ONCE);
      const keys = [queue.keys.completed!, queue.keys.failed!, ...ids.map((id) => queue.toKey(id))];
      const letters = String(await client.eval(JOB_STATES, keys.length, ...keys, ...ids));
      if (letters.length !== ids.length)
        throw new Error(`job states: ${letters.length} answers for ${ids.length} jobs`);
      for (const letter of letters)
        states.push(letter === "m" ? "missing" : letter === "f" ? "finished" : "pending");
    }
    return states;
  }

  /** Jobs some worker holds right now, in both queues. */
  async getActive(): Promise<Job[]> {
    return (await Promise.all(this.all().map((queue) => queue.getActive(0, 9_999)))).flat();
  }

  async close(): Promise<void> {
    await Promise.all(this.all().map((queue) => queue.close()));
  }
}
