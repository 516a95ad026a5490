/**
 * The worker process: claims run jobs from BullMQ and runs sessions (session-job.ts).
 * Shutdown through `stop()` (SIGTERM/SIGINT in `fleet worker`): stop claiming, let running
 * work finish for the grace period, then abort it — aborted runs end `cancelled` and hand
 * their session to another worker — and close every connection even if one close throws.
 */
import { randomUUID } from "node:crypto";
import { hostname } from "node:os";
import type { Job } from "bullmq";
import pino, { type Logger } from "pino";
import { newBullWorker } from "../shared/bull-worker.js";
import { bullmq } from "../shared/cjs-packages.js";
import type { FleetConfig } from "../shared/config.js";
import { openDatabase } from "../shared/db/client.js";
import { ValidationError } from "../shared/errors.js";
import { warnDroppedStream } from "../shared/event-writer.js";
import { SessionLease } from "../shared/lease.js";
import {
  createMetrics,
  type FleetMetrics,
  initEndpointSeries,
  initToolSeries,
  initWorkerLiveness,
} from "../shared/metrics.js";
import { ParsedAgents } from "../shared/parsed-agents.js";
import { checkDatabase } from "../shared/preflight.js";
import { ProviderLimits } from "../shared/provider-limits.js";
import { isRunJobName, parseRunJob, QUEUES, type QueueKey, RunQueues } from "../shared/queues.js";
import { closeRedis, createRedis, isConnectionError, RedisOutageLog } from "../shared/redis.js";
import { resumePolicyOf } from "../shared/resume-policy.js";
import { roleEventWriter, watchEvictionAndServeMetrics } from "../shared/role-start.js";
import { closeAll, closeWithin } from "../shared/shutdown.js";
import { AutomaticResumes } from "../shared/store/automatic-resumes.js";
import { CapacityWaits } from "../shared/store/capacity-waits.js";
import { DataDeletion } from "../shared/store/data-deletion.js";
import { FencedWrites } from "../shared/store/fenced-writes.js";
import { SessionQueries } from "../shared/store/session-queries.js";
import { endRunOfUnknownJob } from "../shared/store/unknown-job-runs.js";
import { registerToolNames } from "../shared/tool-names.js";
import { RefusalLog } from "../shared/unavailable.js";
import {
  beat,
  cancelChannel,
  endHeartbeat,
  eventsChannel,
  livenessName,
  parseCancelMessage,
} from "../shared/worker-signals.js";
import { DEFAULT_RETRY_POLICY } from "./call-model.js";
import { DeletionHooks } from "./deletion-hooks.js";
import type { Extension } from "./extensions.js";
import { defaultFetchers, fetcherSlots } from "./fetchers.js";
import { HistoryCache } from "./history-cache.js";
import { Extensions } from "./hook-runner.js";
import { createModel, redisFaultCounter } from "./models/create-model.js";
import { abortableSleep } from "./models/scripted.js";
import { UnknownJobs } from "./newer-job-wait.js";
import { checkWorkerOptions } from "./plugin-checks.js";
import { putBack } from "./put-back.js";
import { RunningJobs } from "./running-jobs.js";
import { processSessionJob, type SessionJobDeps } from "./session-job.js";
import { builtinTools } from "./tools/builtin.js";
import { type Tool, ToolRegistry } from "./tools/registry.js";
import { TranscriptCleanup } from "./transcript-cleanup.js";
import { transcriptExtension } from "./transcript-extension.js";
import { logWorkerError } from "./worker-errors.js";

export type WorkerOptions = {
  /** Tools registered besides the built-ins. */
  tools?: Tool[];
  /** Extensions whose hooks run around every run (contracts §8), besides the built-in transcript. */
  extensions?: Extension[];
  /** Serve /metrics; default true. */
  serveMetrics?: boolean;
  logger?: Logger;
};

export type RunningWorker = {
  workerId: string;
  metrics: FleetMetrics;
  metricsPort: number | null;
  stop: () => Promise<void>;
};

export async function startWorker(config: FleetConfig, options: WorkerOptions = {}): Promise<RunningWorker> {
  // Tools and extensions given in code are checked as `fleet worker`'s modules are, before
  // anything is opened: a misspelt hook was never called, a second tool of a name replaced the
  // first (plugin-checks.ts). A ValidationError naming `options.tools` or `options.extensions`.
  checkWorkerOptions(options);
  // A program that embeds the worker has no `fleet worker` preflight: a database this release's
  // migrations have not all reached is refused here (ValidationError naming DATABASE_URL), not
  // met by every job it claims as a column that does not exist.
  await checkDatabase(config.databaseUrl, config.preflightTimeoutMs);
  const workerId = `${hostname()}-${process.pid}-${randomUUID().slice(0, 8)}`;
  const log = options.logger ?? pino({ level: config.logLevel, base: { role: "worker", workerId } });
  const database = openDatabase(config.databaseUrl, {
    max: config.workerDbPool,
    role: "worker",
    silenceMs: config.databaseSilenceMs,
  });
  // One connection per BullMQ worker (runs, resumes): each blocks on its own queue.
  const bullRedis = [createRedis(config.redisUrl, "worker"), createRedis(config.redisUrl, "worker")];
  // This connection's name is the worker's liveness signal (liveness.ts): it vanishes from
  // CLIENT LIST the moment the process dies. Its leases go through it too.
  const redis = createRedis(config.redisUrl, "worker", livenessName(config.prefix, workerId));
  const queues = new RunQueues(redis, config.prefix);
  const metrics = createMetrics("worker");
  // One warning when Redis goes away and one when it is back, not a stack trace per reconnect.
  new RedisOutageLog(log).watch(redis, ...bullRedis);
  const refusals = new RefusalLog(log);
  // Before it says it is ready: one warning when Redis may evict the leases and jobs. Then the
  // metrics port: a worker that cannot serve it stops before it registers tools or claims a
  // job, and leaves nothing open that would keep the process alive.
  const { stopEvictionWatch, server } = await watchEvictionAndServeMetrics({
    serve: options.serveMetrics !== false,
    config,
    log,
    metrics,
    database,
    redis,
    others: bullRedis,
    queues,
  });
  const tools = new ToolRegistry().register(...builtinTools(config.toolDir), ...(options.tools ?? []));
  initToolSeries(metrics, tools.names());
  initEndpointSeries(metrics, config.models.endpoints.values());
  // Before it says it is ready: the API accepts an agent listing a tool once a worker has
  // registered its name (contracts.md §12).
  await registerToolNames(redis, config.prefix, tools.names());
  // The heartbeat, for a sweeper whose Redis refuses CLIENT LIST (liveness.ts): beaten before
  // the first job is claimed, then every third of the lease TTL. A failed beat is the outage
  // log's to report; the next one tries again.
  // fleet_worker_heartbeat_age_seconds says how long ago one last went through.
  const heartbeatTtl = config.leaseTtlMs;
  let lastBeatAt = Date.now();
  const beatOnce = () =>
    beat(redis, config.prefix, workerId, heartbeatTtl).then(() => {
      lastBeatAt = Date.now();
    });
  await beatOnce();
  initWorkerLiveness(metrics, heartbeatTtl, () => lastBeatAt);
  const heartbeat = setInterval(
    () => {
      beatOnce().catch(() => {});
    },
    Math.max(50, Math.floor(heartbeatTtl / 3)),
  );
  heartbeat.unref();
  const faults = redisFaultCounter(redis, config.prefix);
  const queries = new SessionQueries(database);
  const writes = new FencedWrites(database, { gatherMs: config.workerGatherMs });
  const histories = config.historyCacheBytes > 0 ? new HistoryCache(config.historyCacheBytes) : undefined;
  // Session events (contracts §7) go through the liveness connection: one script call each.
  const events = roleEventWriter(redis, config, metrics.eventsWritten, config.workerGatherMs, {
    database,
    onDropped: warnDroppedStream(log),
  });
  // Transcripts of deleted sessions go when a delete is announced, and by a pass at start and
  // every FLEET_TRANSCRIPT_SWEEP_MS for deletes this worker did not hear of.
  const deletions = new DataDeletion(database);
  const transcripts = config.transcriptDir
    ? new TranscriptCleanup(config.transcriptDir, (ids) => deletions.existingSessions(ids))
    : null;
  const sweepTranscripts = () => {
    transcripts
      ?.sweep()
      .then((removed) => {
        if (removed > 0) log.info({ removed }, "removed the transcripts of deleted sessions");
      })
      .catch((error: unknown) =>
        log.warn({ err: error }, "transcript pass failed; the next one tries again"),
      );
  };
  sweepTranscripts();
  const transcriptTimer = setInterval(sweepTranscripts, config.transcriptSweepMs);
  transcriptTimer.unref();
  const extensions = new Extensions(
    [
      ...(config.transcriptDir && transcripts
        ? [transcriptExtension(config.transcriptDir, transcripts)]
        : []),
      ...(options.extensions ?? []),
    ],
    metrics,
    log,
    config.hookTimeoutMs,
  );
  // The extensions' onSessionDeleted hooks, owed by deletes (the outbox in Postgres).
  const deletionHooks = new DeletionHooks(deletions, extensions, log, config.hookTimeoutMs);
  deletionHooks.start();
  const resumes = new AutomaticResumes(database, resumePolicyOf(config), metrics);
  resumes.events = events;
  // Sessions cancelled through the API (contracts §9) are aborted here as on SIGTERM past
  // the grace period; the API publishes their ids and the runs it found running (those only
  // are aborted: running-jobs.ts), and the check before each tool starts (agent-loop.ts)
  // covers a message this worker missed.
  const running = new RunningJobs();
  const cancelRedis = createRedis(config.redisUrl, "worker");
  cancelRedis.on("message", (_channel: string, text: string) => {
    const { sessionIds, runIds, deleted } = parseCancelMessage(text);
    running.cancel(sessionIds, runIds);
    if (deleted.length > 0) deletionHooks.wake();
    // A deleted session's kept history goes at once (a delete also reaching no worker leaves
    // it to be pushed out; no claim can use it: the session is gone).
    for (const id of deleted) histories?.take(id);
    if (deleted.length > 0)
      transcripts
        ?.remove(deleted)
        .catch((error: unknown) =>
          log.warn({ err: error }, "could not remove deleted sessions' transcripts"),
        );
  });
  await cancelRedis.subscribe(cancelChannel(config.prefix));

  // Finished jobs' last event writes and lease releases (session-job.ts `afterJob`): their
  // slots took new jobs meanwhile; a stopping worker waits for them before it closes Redis.
  const closing = new Set<Promise<void>>();
  const capacityWaits = new CapacityWaits(database);
  const deps: SessionJobDeps = {
    workerId,
    afterJob: (done) => {
      closing.add(done);
      void done.then(() => closing.delete(done));
    },
    queries,
    writes,
    cancelled: (fence) => writes.sessionCancelled(fence),
    // Provider limits across the fleet (contracts §15): gates on declared endpoints, hand-backs.
    capacity: {
      waits: capacityWaits,
      endpoints: config.models.endpoints,
      gate: {
        limits: new ProviderLimits(redis, config.prefix, config.gateTuning),
        shares: config.tenantShares,
        metrics,
        sleep: abortableSleep,
      },
    },
    // A rolling deploy's newer agents wait for a newer worker (newer-agent-wait.ts); 0: park at once.
    ...(config.newerAgentWaitMs > 0
      ? { newerAgents: { waitMs: config.newerAgentWaitMs, waits: capacityWaits } }
      : {}),
    resumes,
    events,
    extensions,
    ...(histories ? { histories } : {}),
    agents: new ParsedAgents(),
    lease: new SessionLease(redis, config.prefix, config.leaseTtlMs, config.workerGatherMs),
    leaseTtlMs: config.leaseTtlMs,
    dbRideoutMs: config.workerDbRideoutMs,
    models: (model, field) => createModel(model, { faults, routing: config.models }, field),
    tools,
    toolTimeoutMs: config.toolTimeoutMs,
    metrics,
    sleep: abortableSleep,
    retryPolicy: {
      ...DEFAULT_RETRY_POLICY,
      maxStepMs: config.modelStepTimeoutMs,
      maxOutputChars: config.modelMaxOutputChars,
    },
    reportStop: async (sessionId, outcome) => {
      await redis.publish(
        eventsChannel(config.prefix),
        JSON.stringify({ type: "run_stopped", sessionId, outcome }),
      );
    },
    enqueue: async (run, delayMs) => {
      await queues.enqueue(
        run.kind === "resume" ? "resume" : "run",
        { sessionId: run.sessionId, runId: run.id },
        { delayMs },
      );
    },
    log,
  };

  // A job of a kind a newer release added waits for a newer worker, then ends its run (newer-job-wait.ts).
  const unknownJobs = new UnknownJobs({
    waitMs: config.newerAgentWaitMs,
    redis,
    prefix: config.prefix,
    putBack: (job, until, token) => putBack(redis, config.prefix, job, until, token),
    endRun: (target, detail) => endRunOfUnknownJob(database, target, detail),
    events,
    database,
    metrics,
    log,
  });

  const processor = async (job: Job, token?: string, signal?: AbortSignal) => {
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
      await putBack(redis, config.prefix, job, Date.now() + 100 + Math.floor(Math.random() * 200), token);
      throw new bullmq.DelayedError();
    }
    if (typeof result === "object") {
      // A run waits for its endpoint's capacity (contracts §15): the job is handed back to the
      // delayed set (no attempt counted: moveToDelayed skips it) and frees this slot now.
      // It comes back no later than the queue's head (put-back.ts: a renumbering meanwhile).
      await putBack(redis, config.prefix, job, Date.now() + Math.max(1, result.handedBack), token);
      throw new bullmq.DelayedError();
    }
    return result;
  };

  // New work and resumes each have slots of their own: a resume never waits for new work
  // to free a slot, so a crashed session comes back within a second under any backlog.
  const startBullWorker = (key: QueueKey, connection: (typeof bullRedis)[number], concurrency: number) => {
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
      if (job) log.warn({ jobId: job.id, err: error.message }, "job failed");
      void wakeSweeper("job_failed", job?.id);
    });
    return worker;
  };
  // Each queue's slots spread over a few BullMQ Workers, which fetch side by side (fetchers.ts).
  const startQueue = (key: QueueKey, connection: (typeof bullRedis)[number], concurrency: number) =>
    fetcherSlots(concurrency, config.workerFetchers ?? defaultFetchers(concurrency)).map((slots) =>
      startBullWorker(key, connection, slots),
    );
  const workers = [
    ...startQueue("runs", bullRedis[0]!, config.workerConcurrency),
    ...startQueue("resumes", bullRedis[1]!, config.workerResumeConcurrency),
  ];
  await Promise.all(workers.map((worker) => worker.waitUntilReady()));

  log.info(
    {
      metricsPort: server?.port,
      concurrency: config.workerConcurrency,
      resumeConcurrency: config.workerResumeConcurrency,
      bullmqWorkers: workers.length,
    },
    "worker started",
  );

  let stopping: Promise<void> | null = null;
  const stop = () => {
    stopping ??= (async () => {
      log.info("worker stopping: no new jobs; letting running work finish");
      const closed = Promise.all(workers.map((worker) => worker.close()));
      const graceOver = new Promise<"grace">((resolve) => {
        const t = setTimeout(() => resolve("grace"), config.shutdownGraceMs);
        t.unref();
      });
      if ((await Promise.race([closed.then(() => "closed" as const), graceOver])) === "grace") {
        log.warn("grace period over: aborting running work");
        for (const worker of workers) worker.cancelAllJobs("worker shutting down");
      }
      // While Redis is away neither BullMQ's close (taskforcesh/bullmq#4656) nor a job's last
      // writes end: after the grace period they are waited for at most STOP_WAIT_MS, then the
      // connections are closed; a job left so is the sweeper's to resume, as after a crash.
      // One wait: `fleet worker`'s exit deadline counts it (shutdown.ts STOP_WAITS).
      await closeAll(
        [
          () =>
            closeWithin(
              closed.then(() => Promise.all(closing)),
              "a running job",
              log,
            ),
          // What BullMQ's close would have stopped after the jobs: its lock renewal and its
          // blocking connection (shared/bull-worker.ts).
          () => Promise.all(workers.map((worker) => worker.stopKeepingAlive())),
          () => deletionHooks.stop(),
          async () => {
            clearInterval(heartbeat);
            clearInterval(transcriptTimer);
            stopEvictionWatch();
            // Best effort: a Redis that is away must not hold the stop up (the beat lapses).
            if (redis.status !== "ready") return;
            const wait = new Promise<void>((resolve) => setTimeout(resolve, 1_000).unref());
            await Promise.race([endHeartbeat(redis, config.prefix, workerId), wait]);
          },
          () => queues.close(),
          ...bullRedis.map((connection) => () => closeRedis(connection)),
          () => closeRedis(redis),
          () => closeRedis(cancelRedis),
          () => database.close(),
          async () => server?.close(),
        ],
        log,
      );
      log.info("worker stopped");
    })();
    return stopping;
  };
  return { workerId, metrics, metricsPort: server?.port ?? null, stop };
}
