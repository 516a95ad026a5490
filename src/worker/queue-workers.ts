/**
 * The worker's BullMQ Workers: the runs queue's slots and the resumes queue's, each spread
 * over a few Workers that fetch side by side (fetchers.ts), each job to the job processor
 * (job-processor.ts). Their errors are logged once, and a job BullMQ failed or found stalled
 * wakes the sweeper at once.
 */
import type { Redis } from "ioredis";
import type { Logger } from "pino";
import { type BullWorker, newBullWorker } from "../shared/bull-worker.js";
import type { FleetConfig } from "../shared/config.js";
import { QUEUES, type QueueKey } from "../shared/queues.js";
import { isConnectionError } from "../shared/redis-outage.js";
import type { RefusalLog } from "../shared/unavailable.js";
import { eventsChannel } from "../shared/worker-signals.js";
import { defaultFetchers, fetcherSlots } from "./fetchers.js";
import type { jobProcessor } from "./job-processor.js";
import { WORKER_STOP_REASON } from "./run-outcome.js";
import { logWorkerError } from "./worker-errors.js";

export type QueueWorkersDeps = {
  config: FleetConfig;
  workerId: string;
  processor: ReturnType<typeof jobProcessor>;
  /** One blocking connection per queue: runs, then resumes. */
  bullRedis: [Redis, Redis];
  /** The liveness connection: the sweeper's wake-ups go through it. */
  redis: Redis;
  refusals: RefusalLog;
  log: Logger;
};

/** Starts the BullMQ Workers of both queues, once each is ready. */
export async function startQueueWorkers(deps: QueueWorkersDeps): Promise<BullWorker[]> {
  const { config, workerId, processor, bullRedis, redis, refusals, log } = deps;
  // New work and resumes each have slots of their own: a resume never waits for new work
  // to free a slot, so a crashed session comes back within a second under any backlog.
  const startBullWorker = (key: QueueKey, connection: Redis, concurrency: number) => {
    const worker = newBullWorker(QUEUES[key].name, processor, {
      connection,
      prefix: config.prefix,
      concurrency,
      autorun: true,
      // Recorded on each job it claims (`processedBy`): the sweeper matches it to liveness.
      name: workerId,
      // A job claimed by a worker that dies before starting its run (so the sweeper, which
      // watches running runs, has nothing to see) comes back through BullMQ's stalled check:
      // within lockDuration + stalledInterval (≤ 15 s) instead of the defaults' ~60 s.
      lockDuration: 10_000,
      stalledInterval: 5_000,
      maxStalledCount: 3,
    });
    // A BullMQ lock lost (it lapsed while Redis was unreachable for longer than its 10 s) no
    // longer cancels the job: the session lease decides who acts on a session (the job stops
    // when that is lost: lease-keeper.ts), and a copy of the job BullMQ hands out again finds
    // the session busy and waits behind this one. Cancelling redid every such run elsewhere.
    // A lost Redis link is RedisOutageLog's to report, once per outage; a Redis refusing
    // writes (OOM), RefusalLog's, once a minute.
    worker.on("error", (error) => {
      if (!isConnectionError(error) && !refusals.report(error)) logWorkerError(log, error);
    });
    // BullMQ's word that a job failed or stalled wakes the sweeper at once (it would see the
    // session at its next wide scan, within a second); told from here, the sweeper need not
    // read the queues' whole event streams for these two.
    const wakeSweeper = (type: "job_failed" | "job_stalled", jobId: string | undefined) =>
      redis
        .publish(eventsChannel(config.prefix), JSON.stringify({ type, queue: key, jobId }))
        .catch(() => {});
    worker.on("stalled", (jobId) => void wakeSweeper("job_stalled", jobId));
    worker.on("failed", (job, error) => {
      // As the run's error says it: what the processor threw reaches BullMQ, and here, with a
      // key it quotes scrubbed and a long one clipped (bull-worker.ts `queueFailure`).
      if (job) log.warn({ jobId: job.id, err: error.message }, "job failed");
      void wakeSweeper("job_failed", job?.id);
    });
    return worker;
  };
  // Each queue's slots spread over a few BullMQ Workers, which fetch side by side (fetchers.ts).
  const startQueue = (key: QueueKey, connection: Redis, concurrency: number) =>
    fetcherSlots(concurrency, config.workerFetchers ?? defaultFetchers(concurrency)).map((slots) =>
      startBullWorker(key, connection, slots),
    );
  const workers = [
    ...startQueue("runs", bullRedis[0], config.workerConcurrency),
    ...startQueue("resumes", bullRedis[1], config.workerResumeConcurrency),
  ];
  await Promise.all(workers.map((worker) => worker.waitUntilReady()));
  return workers;
}

/**
 * Stops the Workers claiming and lets their running jobs finish for `graceMs`, then aborts
 * them (their runs end `cancelled`). Resolves when they closed or the grace period is over;
 * `closed` resolves when they closed.
 */
export async function closeQueueWorkers(
  workers: BullWorker[],
  graceMs: number,
  log: Pick<Logger, "warn">,
): Promise<{ closed: Promise<unknown> }> {
  const closed = Promise.all(workers.map((worker) => worker.close()));
  const graceOver = new Promise<"grace">((resolve) => {
    const t = setTimeout(() => resolve("grace"), graceMs);
    t.unref();
  });
  if ((await Promise.race([closed.then(() => "closed" as const), graceOver])) === "grace") {
    log.warn("grace period over: aborting running work");
    for (const worker of workers) worker.cancelAllJobs(WORKER_STOP_REASON);
  }
  return { closed };
}
