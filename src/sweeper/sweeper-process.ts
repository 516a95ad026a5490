/**
 * The sweeper process (`fleet sweeper`, also inside `fleet up`): ticks the Sweeper on a
 * short interval for dead or frozen workers, runs the wider scans every few ticks, and
 * wakes at once when a worker reports a run that stopped short.
 */
import { randomUUID } from "node:crypto";
import pino, { type Logger } from "pino";
import type { FleetConfig } from "../shared/config.js";
import { openDatabase } from "../shared/db/client.js";
import { fleetDeletionCleanup } from "../shared/deletion-cleanup.js";
import { warnDroppedStream } from "../shared/event-writer.js";
import { SessionLease } from "../shared/lease.js";
import { initSweeperIntervals } from "../shared/liveness-metrics.js";
import { createMetrics, type FleetMetrics, initRunProgress, initSweeperPasses } from "../shared/metrics.js";
import { ProviderLimits, waitsForgetter } from "../shared/provider-limits.js";
import { openWebhookQueue, RunQueues } from "../shared/queues.js";
import { closeRedis, createRedis } from "../shared/redis.js";
import { RedisOutageLog } from "../shared/redis-outage.js";
import { resumePolicyOf } from "../shared/resume-policy.js";
import { roleEventWriter, watchEvictionAndServeMetrics } from "../shared/role-start.js";
import { closeAll, closeWithin, STOP_WAIT_MS } from "../shared/shutdown.js";
import { AutomaticResumes } from "../shared/store/automatic-resumes.js";
import { BatchStore } from "../shared/store/batches.js";
import { DataDeletion } from "../shared/store/data-deletion.js";
import { DeletedRuns } from "../shared/store/deleted-runs.js";
import { IDEMPOTENCY_PRUNE_PAGE, IdempotencyStore } from "../shared/store/idempotency.js";
import { SessionQueries } from "../shared/store/session-queries.js";
import { WebhookSecretGenerations } from "../shared/store/webhook-secret-generations.js";
import { eventsChannel, publishCancel } from "../shared/worker-signals.js";
import { BatchEnds, startWebhookWorker } from "./batch-ends.js";
import { CancelledLeftovers } from "./cancelled-leftovers.js";
import { DeletedRunStops } from "./deleted-runs.js";
import { sweeperName } from "./liveness.js";
import { Retention, retainOnTimer } from "./retention.js";
import { RunProgress } from "./run-progress.js";
import { passIntervalsMs, sweepPass, WIDE_SCAN_EVERY } from "./sweep-pass.js";
import { SweepQueries } from "./sweep-queries.js";
import { Sweeper } from "./sweeper.js";

export type RunningSweeper = {
  sweeper: Sweeper;
  metrics: FleetMetrics;
  metricsPort: number | null;
  stop: () => Promise<void>;
};

/** After the sweeper's own Redis connection comes back, workers are reconnecting too. */
const RECONNECT_QUIET_MS = 3_000;

export async function startSweeper(
  config: FleetConfig,
  options: { serveMetrics?: boolean; logger?: Logger } = {},
): Promise<RunningSweeper> {
  const log = options.logger ?? pino({ level: config.logLevel, base: { role: "sweeper" } });
  const database = openDatabase(config.databaseUrl, {
    max: 4,
    role: "sweeper",
    silenceMs: config.databaseSilenceMs,
  });
  // Named, so that another sweeper sees at once that this one died holding a sweep lock.
  const name = sweeperName(config.prefix, `${process.pid}-${randomUUID().slice(0, 8)}`);
  const redis = createRedis(config.redisUrl, "worker", name);
  const subscriber = createRedis(config.redisUrl, "worker");
  const queues = new RunQueues(redis, config.prefix);
  const metrics = createMetrics("sweeper");
  // One warning when Redis goes away and one when it is back, not a line per reconnect.
  new RedisOutageLog(log).watch(redis, subscriber);
  // One warning when Redis may evict the leases and jobs, then the metrics port: a sweeper that
  // cannot serve it stops before its first sweep, and leaves nothing open that would keep the
  // process alive.
  const { stopEvictionWatch, server } = await watchEvictionAndServeMetrics({
    serve: options.serveMetrics !== false,
    config,
    log,
    metrics,
    database,
    redis,
    others: [subscriber],
    queues,
  });
  const events = roleEventWriter(redis, config, metrics.eventsWritten, 0, {
    onDropped: warnDroppedStream(log),
  });
  // Aborted by stop(): the passes and retention look at nothing more (sweeper.ts, retention.ts).
  const halt = new AbortController();
  const resumes = new AutomaticResumes(database, resumePolicyOf(config), metrics);
  resumes.events = events;
  const sweeps = new SweepQueries(database);
  const runEnded = (sessionId: string, runId: string, outcome: string, through?: number) =>
    events.writeAfterSync(database, sessionId, [{ type: "RUN_COMPLETED", runId, outcome }], through);
  const lease = new SessionLease(redis, config.prefix, config.leaseTtlMs);
  const sweeper = new Sweeper({
    prefix: config.prefix,
    redis,
    lease,
    queries: new SessionQueries(database),
    sweeps,
    queues,
    metrics,
    resumes,
    log,
    progress: new RunProgress({
      gauges: initRunProgress(metrics, config.runStuckAfterMs),
      stuckAfterMs: config.runStuckAfterMs,
      log,
    }),
    runEnded,
    runEndMissing: (sessionId) => events.missingRunEnd(database, sessionId, 0),
    name,
    signal: halt.signal,
  });
  const cancelSignal = (sessionIds: string[], runIds: string[]) =>
    publishCancel(redis, config.prefix, sessionIds, runIds);
  const leftovers = new CancelledLeftovers({ sweeps, queues, metrics, log, runEnded, cancelSignal });
  const holders = (ids: readonly string[]) => lease.holders(ids);
  const deletedRuns = new DeletedRunStops({
    runs: new DeletedRuns(database),
    holders,
    stopSignal: cancelSignal,
    log,
  });
  // Batches (contracts §9): ends noticed on each wide scan; webhooks delivered on a
  // connection of their own (batch-ends.ts says why here).
  const batchStore = new BatchStore(database);
  const webhookQueue = openWebhookQueue(redis, config.prefix);
  const batchEnds = new BatchEnds({ store: batchStore, queue: webhookQueue, log });
  // Idempotency-Keys older than 24 h are removed once a minute, and at every wide scan while
  // a prune removes a full page (keys expire faster than one page a minute: 167 a second).
  const idempotency = new IdempotencyStore(database);
  let prunedAt = 0;
  let pruneAgain = false;
  const webhookRedis = createRedis(config.redisUrl, "worker");
  const webhookWorker = startWebhookWorker({
    connection: webhookRedis,
    prefix: config.prefix,
    store: batchStore,
    settings: config.webhooks,
    generations: new WebhookSecretGenerations(database),
    log,
    metrics,
  });

  // Retention (FLEET_RETENTION_DAYS) and batch deletions the API left unfinished: on a timer
  // of their own, so a long pass never delays the liveness checks.
  const retention = new Retention({
    store: new DataDeletion(database),
    cleanup: fleetDeletionCleanup({
      redis,
      config,
      queues,
      metrics,
      waitsGone: waitsForgetter(new ProviderLimits(redis, config.prefix, config.gateTuning), [
        ...config.models.endpoints.values(),
      ]),
    }),
    settings: config.retention,
    log,
    metrics,
  });
  const retaining = retainOnTimer(retention, config.retention.intervalMs, halt.signal, log);

  let quietUntil = 0;
  let connectedBefore = redis.status === "ready"; // ready already: the next `ready` is a reconnect
  redis.on("ready", () => {
    if (connectedBefore) {
      // Redis restarted or the link dropped: workers are reconnecting too, so their absence
      // from CLIENT LIST means nothing for a moment.
      quietUntil = performance.now() + RECONNECT_QUIET_MS; // monotonic: a wall clock step back would stretch it
      sweeper.resetLiveness();
    }
    connectedBefore = true;
  });

  // When each pass last ended well (fleet_sweeper_pass_age_seconds): the start, before the first.
  const passDoneAt = { liveness: Date.now(), wide: Date.now() };
  initSweeperPasses(metrics, (pass) => passDoneAt[pass]);
  initSweeperIntervals(metrics, passIntervalsMs(config.sweepIntervalMs));
  let ticks = 0;
  let wideScanRequested = true;
  let stopped = false;
  // Two passes, each never run twice at once, but not waiting for each other: a wide scan
  // stuck in a slow statement (a plan Postgres made for empty tables held one for over 15
  // minutes) must not hold up the liveness check, which finds dead and frozen workers. They
  // act on sessions under the same per-session Redis lock as two sweepers do.
  const liveness = sweepPass(
    log,
    "liveness check",
    async () => {
      if (performance.now() >= quietUntil) await sweeper.sweepWorkers();
    },
    () => stopped,
    () => (passDoneAt.liveness = Date.now()),
  );
  const wide = sweepPass(
    log,
    "wide scan",
    async () => {
      await sweeper.sweepInterrupted();
      if (stopped) return;
      await sweeper.sweepOrphanedRuns();
      if (stopped) return;
      await sweeper.sweepOwedParks();
      if (stopped) return;
      // Before the batch ends: a batch whose last session kept such a run ends with it.
      await leftovers.scan();
      if (stopped) return;
      await deletedRuns.scan();
      if (stopped) return;
      await batchEnds.scan();
      if (stopped) return;
      if (pruneAgain || Date.now() - prunedAt > 60_000) {
        prunedAt = Date.now();
        pruneAgain = (await idempotency.prune(IDEMPOTENCY_PRUNE_PAGE)) >= IDEMPOTENCY_PRUNE_PAGE;
      }
    },
    () => stopped,
    () => (passDoneAt.wide = Date.now()),
  );
  const tick = () => {
    if (stopped) return;
    void liveness.run();
    // A scan asked for while one runs is kept for the tick after it.
    if ((wideScanRequested || ticks % WIDE_SCAN_EVERY === 0) && !wide.running) {
      wideScanRequested = false;
      void wide.run();
    }
    ticks++;
  };
  const timer = setInterval(tick, config.sweepIntervalMs);

  const wake = () => {
    wideScanRequested = true;
    setImmediate(tick);
  };
  // Events, not only a poll: a worker's report of a run that stopped short, and its word that
  // BullMQ failed or found stalled one of its jobs (worker.ts). Not a QueueEvents reader: that
  // reads every event of the queues (several per job) to find these few.
  await subscriber.subscribe(eventsChannel(config.prefix));
  subscriber.on("message", wake);

  log.info({ metricsPort: server?.port }, "sweeper started");

  let stopping: Promise<void> | null = null;
  return {
    sweeper,
    metrics,
    metricsPort: server?.port ?? null,
    stop: () => {
      stopping ??= (async () => {
        stopped = true;
        clearInterval(timer);
        retaining.stop();
        stopEvictionWatch();
        halt.abort();
        // A delivery under way records itself in Postgres: it ends first. Then the pool, which
        // refuses new statements and cancels those still running (a pass waiting on a lock, a
        // slow plan): they would otherwise go on in Postgres after this process exited, and
        // hold up this stop meanwhile. What a cancelled pass left undone, the next sweeper
        // finds, as after a crash.
        // Neither the webhook Worker's close nor a pass waiting on a Redis command ends while
        // Redis is away: they are waited for at most STOP_WAIT_MS in all (past a delivery's own
        // 10 s deadline), then the connections below are closed. A command still waiting on a
        // connection Redis had left is then never answered (ioredis), its pass never ends,
        // and nothing of it holds the process. What the webhook Worker's close would have
        // stopped is stopped then (its lock renewal, its blocking connection:
        // shared/bull-worker.ts): nothing of this sweeper keeps an embedding program alive
        // once the stop has returned (test/sweeper-stop-redis-away.test.ts).
        const giveUpAt = Date.now() + STOP_WAIT_MS;
        const left = () => Math.max(0, giveUpAt - Date.now());
        await closeAll(
          [
            () => closeWithin(webhookWorker.close(), "the webhook worker", log, left()),
            () => webhookWorker.stopKeepingAlive(),
            () => database.close(),
          ],
          log,
        );
        await closeWithin(Promise.all([liveness.ended, wide.ended]), "a pass", log, left());
        await closeWithin(retaining.running(), "a retention pass", log, left());
        await closeAll(
          [
            () => webhookQueue.close(),
            () => closeRedis(webhookRedis),
            () => queues.close(),
            () => closeRedis(subscriber),
            () => closeRedis(redis),
            async () => server?.close(),
          ],
          log,
        );
      })();
      return stopping;
    },
  };
}
