/**
 * The worker process: claims run jobs from BullMQ and runs sessions (session-job.ts).
 * Shutdown through `stop()` (SIGTERM/SIGINT in `fleet worker`): stop claiming, let running
 * work finish for the grace period, then abort it — aborted runs end `cancelled` and hand
 * their session to another worker — and close every connection even if one close throws.
 */
import { randomUUID } from "node:crypto";
import { hostname } from "node:os";
import pino, { type Logger } from "pino";
import type { FleetConfig } from "../shared/config.js";
import { openDatabase } from "../shared/db/client.js";
import { warnDroppedStream } from "../shared/event-writer.js";
import { SessionLease } from "../shared/lease.js";
import { createMetrics, type FleetMetrics, initEndpointSeries, initToolSeries } from "../shared/metrics.js";
import { ParsedAgents } from "../shared/parsed-agents.js";
import { checkDatabase } from "../shared/preflight.js";
import { ProviderLimits } from "../shared/provider-limits.js";
import { RunQueues } from "../shared/queues.js";
import { closeRedis, createRedis } from "../shared/redis.js";
import { RedisOutageLog } from "../shared/redis-outage.js";
import { resumePolicyOf } from "../shared/resume-policy.js";
import { roleEventWriter, watchEvictionAndServeMetrics } from "../shared/role-start.js";
import { closeAll, closeWithin } from "../shared/shutdown.js";
import { AutomaticResumes } from "../shared/store/automatic-resumes.js";
import { CapacityWaits } from "../shared/store/capacity-waits.js";
import { DataDeletion } from "../shared/store/data-deletion.js";
import { FencedWrites } from "../shared/store/fenced-writes.js";
import { SessionQueries } from "../shared/store/session-queries.js";
import { endRunOfUnknownJob } from "../shared/store/unknown-job-runs.js";
import { keepToolNamesRegistered, registerToolNames } from "../shared/tool-names.js";
import { RefusalLog } from "../shared/unavailable.js";
import { eventsChannel, livenessName } from "../shared/worker-signals.js";
import { DEFAULT_RETRY_POLICY } from "./call-model.js";
import { listenForCancels } from "./cancel-listener.js";
import { DeletionHooks } from "./deletion-hooks.js";
import type { Extension } from "./extensions.js";
import { HistoryCache } from "./history-cache.js";
import { Extensions } from "./hook-runner.js";
import { jobProcessor } from "./job-processor.js";
import { createModel, redisFaultCounter } from "./models/create-model.js";
import { abortableSleep } from "./models/scripted.js";
import { UnknownJobs } from "./newer-job-wait.js";
import { checkWorkerOptions } from "./plugin-checks.js";
import { putBack } from "./put-back.js";
import { closeQueueWorkers, startQueueWorkers } from "./queue-workers.js";
import { RunningJobs } from "./running-jobs.js";
import type { SessionJobDeps } from "./session-job.js";
import { builtinTools } from "./tools/builtin.js";
import { type Tool, ToolRegistry } from "./tools/registry.js";
import { startTranscriptSweeps, TranscriptCleanup } from "./transcript-cleanup.js";
import { transcriptExtension } from "./transcript-extension.js";
import { startHeartbeat } from "./worker-heartbeat.js";

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
  checkWorkerOptions(options, config);
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
  const stopToolNames = keepToolNamesRegistered(redis, config.prefix, tools.names(), config.leaseTtlMs);
  // The heartbeat, for a sweeper whose Redis refuses CLIENT LIST (worker-heartbeat.ts).
  const heartbeat = await startHeartbeat(redis, config.prefix, workerId, config.leaseTtlMs, metrics);
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
  const stopTranscriptSweeps = startTranscriptSweeps(transcripts, config.transcriptSweepMs, log);
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
  // Cancels abort the runs they name; deletes take what this worker keeps (cancel-listener.ts).
  const running = new RunningJobs();
  const cancelRedis = await listenForCancels({
    redisUrl: config.redisUrl,
    prefix: config.prefix,
    running,
    deletionHooks,
    histories,
    transcripts,
    log,
  });

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
    cancelled: (fence, runId) => writes.sessionCancelled(fence, runId),
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
    runMaxMs: config.runMaxMs,
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

  const processor = jobProcessor({ deps, running, unknownJobs, redis, prefix: config.prefix });
  const workers = await startQueueWorkers({
    config,
    workerId,
    processor,
    bullRedis: [bullRedis[0]!, bullRedis[1]!],
    redis,
    refusals,
    log,
  });

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
      const { closed } = await closeQueueWorkers(workers, config.shutdownGraceMs, log);
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
            heartbeat.stopBeating();
            stopToolNames();
            stopTranscriptSweeps();
            stopEvictionWatch();
            await heartbeat.end();
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
