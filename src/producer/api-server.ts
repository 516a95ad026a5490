/** The API process (`fleet api`): the HTTP API plus the queue gauge, on its own connections. */
import type { FleetConfig } from "../shared/config.js";
import { openDatabase } from "../shared/db/client.js";
import { fleetDeletionCleanup } from "../shared/deletion-cleanup.js";
import { ValidationError } from "../shared/errors.js";
import { warnDroppedStream } from "../shared/event-writer.js";
import { checkEvictionPolicy } from "../shared/eviction-policy.js";
import { API_LISTEN, listenError, servicesReachable } from "../shared/http-server.js";
import { createMetrics } from "../shared/metrics.js";
import { packageVersion } from "../shared/package-version.js";
import { ProviderLimits, waitsForgetter } from "../shared/provider-limits.js";
import { openWebhookQueue, RunQueues } from "../shared/queues.js";
import { closeRedis, createRedis } from "../shared/redis.js";
import { RedisOutageLog } from "../shared/redis-outage.js";
import { dropRestoredTombstone } from "../shared/restored-tombstone.js";
import { roleEventWriter } from "../shared/role-start.js";
import { closeAll } from "../shared/shutdown.js";
import { ApiKeys } from "../shared/store/api-keys.js";
import { BatchStore } from "../shared/store/batches.js";
import { DataDeletion } from "../shared/store/data-deletion.js";
import { claimFleet } from "../shared/store/fleet-identity.js";
import { IdempotencyStore } from "../shared/store/idempotency.js";
import { SessionEventsSetting } from "../shared/store/session-events-setting.js";
import { SessionQueries } from "../shared/store/session-queries.js";
import { WebhookSecretGenerations } from "../shared/store/webhook-secret-generations.js";
import { FleetToolNames, readToolNames } from "../shared/tool-names.js";
import { cancelChannel } from "../shared/worker-signals.js";
import { adminBoard } from "./admin-board.js";
import { closeServerWithin, ServerConnections } from "./api-stop.js";
import { ApiAuth, isLoopbackHost, storeBootstrapKey, UnauthorizedError } from "./auth.js";
import { AuthFailureLimiter } from "./auth-failures.js";
import { startOverIfIdle } from "./cancel-cleanup.js";
import { consolePages } from "./console-route.js";
import { Deletions } from "./deletions.js";
import { EventStreams } from "./event-stream.js";
import { FairDispatch } from "./fair-dispatch.js";
import { FleetService } from "./fleet-service.js";
import { buildApi } from "./http-api.js";
import { SessionEventsSwitch } from "./session-events-switch.js";
import { tenantLimiters } from "./tenant-limiters.js";
import { webhookSecretRoutes } from "./webhook-secret-routes.js";

export type RunningApi = {
  port: number;
  url: string;
  /** True when no API key exists and requests without one are served as tenant `default`. */
  devMode: boolean;
  /**
   * From now on `/healthz` answers 503 while every request is still served: a load balancer
   * or Kubernetes takes the API out before `stop` closes its port (FLEET_API_DRAIN_MS).
   */
  drain: () => void;
  stop: () => Promise<void>;
};

/** What `fleet api` says when it will not serve a non-loopback address without any key. */
export const NO_KEY_REFUSAL =
  "no API key exists, and without one the API serves only on a loopback address; create a key with `fleet keys create --tenant NAME` (or set FLEET_BOOTSTRAP_KEY), or listen on 127.0.0.1";

/** The URL clients on this machine reach an API listening on `host` at. */
function localUrl(host: string, port: number): string {
  if (host === "0.0.0.0" || host === "::" || host === "localhost") return `http://127.0.0.1:${port}`;
  return `http://${host.includes(":") ? `[${host}]` : host}:${port}`;
}

const QUEUE_STATES = ["waiting", "active", "delayed", "completed", "failed", "prioritized"] as const;

/**
 * How long after a run's end a reader's stream may write its RUN_COMPLETED for it, when the
 * stream lacks it: by then the writer that ended the run would have written it (it waits for
 * Redis at most 1 s, session-job.ts), so the writer died in between.
 */
const RUN_END_GRACE_MS = 5_000;

/**
 * Starts the API. With no API key stored (after FLEET_BOOTSTRAP_KEY, if set, is stored) it
 * serves without authentication on a loopback HOST, and refuses any other HOST with a
 * ValidationError naming HOST (`fleet api` exits 2).
 */
export async function startApi(config: FleetConfig, options: { port?: number } = {}): Promise<RunningApi> {
  const database = openDatabase(config.databaseUrl, { role: "api", silenceMs: config.databaseSilenceMs });
  const keys = new ApiKeys(database);
  const loopback = isLoopbackHost(config.host);
  let anyKey: boolean;
  let bootstrapWarning: string | undefined;
  try {
    await claimFleet(database, config.prefix);
    bootstrapWarning = await storeBootstrapKey(keys, config.bootstrapKey);
    anyKey = await keys.anyExists();
    if (!anyKey && !loopback) throw new ValidationError("HOST", `${config.host}: ${NO_KEY_REFUSAL}`);
  } catch (error) {
    await database.close();
    throw error;
  }
  const redis = createRedis(config.redisUrl, "producer");
  const queues = new RunQueues(redis, config.prefix);
  // Batch webhook deliveries (the sweeper runs them): their depth and Bull Board's view.
  const webhookQueue = openWebhookQueue(redis, config.prefix);
  // The API is the one process that exports queue depths.
  const metrics = createMetrics("api", {
    queueDepths: async () =>
      (
        await Promise.all(
          [queues.runs, queues.resumes, webhookQueue].map(async (queue) => {
            const counts = await queue.getJobCounts(...QUEUE_STATES);
            return QUEUE_STATES.map((state) => ({ queue: queue.name, state, count: counts[state] ?? 0 }));
          }),
        )
      ).flat(),
  });
  const batches = new BatchStore(database);
  // The API writes the end of runs a cancel dropped while they were queued, and the end of a
  // run whose writer died before writing it, found when a reader's stream looks (missingRunEnd).
  const eventWriter = roleEventWriter(redis, config, metrics.eventsWritten, 0, {
    // The app's logger, made further down: asked for only when a stream is dropped.
    onDropped: (...dropped) => warnDroppedStream(app.log)(...dropped),
  });
  const auth = new ApiAuth({ keys, loopback });
  const eventsSetting = new SessionEventsSetting(database);
  // The app's logger, made further down: asked for only when Redis cannot be reached.
  const limiters = tenantLimiters(redis, config, () => app.log.warn.bind(app.log));
  const events = new EventStreams({
    redis,
    subscriber: () => createRedis(config.redisUrl, "producer"),
    prefix: config.prefix,
    queries: new SessionQueries(database),
    batches,
    metrics,
    maxStreamsPerTenant: config.events.maxStreamsPerTenant,
    tenantSlots: limiters.tenantSlots,
    heartbeatMs: config.events.heartbeatMs,
    stallMs: config.events.stallMs,
    retention: {
      maxEvents: config.events.maxEvents,
      maxAgeMs: config.events.maxAgeMs,
      maxBytes: config.events.maxBytes,
    },
    repairRunEnd: (sessionId) => eventWriter.missingRunEnd(database, sessionId, RUN_END_GRACE_MS),
    restoredTombstone: async (sessionId) => {
      if (await dropRestoredTombstone(redis, config.prefix, database, sessionId))
        await eventWriter.writeAfterSync(database, sessionId, []);
    },
    onBatchStreamDropped: (batchId, member, fingerprint) =>
      app.log.warn(
        { batchId, member: member === "\u0000batch" ? "BATCH_COMPLETED" : member, fingerprint },
        "the batch's event stream had events that Postgres does not have (Postgres restored from an earlier point?): dropped it and wrote it again from Postgres; readers resuming from before get 410",
      ),
    // A key revoked while its stream is open ends the stream, as it ends every other request.
    stillAllowed: async (request, tenant) => {
      try {
        return (await auth.authenticate(request.headers.authorization, request.headers)) === tenant;
      } catch (error) {
        if (error instanceof UnauthorizedError) return false;
        throw error;
      }
    },
    // A stream turned off (PATCH /v1/sessions/:id) ends its readers too.
    sessionStreamOn: (sessionId, tenant) => eventsSetting.isOn(sessionId, tenant),
  });
  const providerLimits = new ProviderLimits(redis, config.prefix, config.gateTuning);
  const waitsGone = waitsForgetter(providerLimits, [...config.models.endpoints.values()]);
  // The fair order's state, shared by the service (runs queued, cancels) and deletions.
  const fair = {
    queries: new SessionQueries(database),
    priorities: new FairDispatch({
      redis,
      queue: queues.runs,
      prefix: config.prefix,
      enabled: config.fairDispatch,
    }),
    resumePriorities: new FairDispatch({
      redis,
      queue: queues.resumes,
      prefix: config.prefix,
      enabled: config.fairDispatch,
    }),
  };
  const service = new FleetService({
    ...fair,
    queues,
    metrics,
    toolNames: new FleetToolNames(() => readToolNames(redis, config.prefix)),
    models: config.models,
    limits: {
      maxActiveSessions: config.tenantLimits.maxActiveSessions,
      maxQueuedRuns: config.tenantLimits.maxQueuedRuns,
    },
    batches,
    cancelSignal: async (sessionIds, runIds) => {
      await redis.publish(cancelChannel(config.prefix), JSON.stringify({ sessionIds, runIds }));
    },
    waitsGone,
    webhooks: config.webhooks,
    runEnded: async (sessionId, runId, outcome) => {
      await eventWriter.write(sessionId, [], [{ type: "RUN_COMPLETED", runId, outcome }]);
    },
    onEnqueueFailed: (error, runIds) =>
      app.log.warn(
        { err: error, runIds },
        "runs stored, their jobs not added (Redis unreachable): the sweeper adds them once Redis answers",
      ),
  });
  const deletions = new Deletions({
    store: new DataDeletion(database),
    cleanup: fleetDeletionCleanup({ redis, config, queues, metrics, waitsGone }),
    onPurgeError: (error, batchId) =>
      app.log.warn(
        { err: error, batchId },
        "batch marked deleted, its sessions not all deleted now: the sweeper finishes the deletion",
      ),
    startOver: (tenant) => startOverIfIdle(fair, tenant),
  });
  const sessionEvents = new SessionEventsSwitch({
    setting: eventsSetting,
    sync: (sessionId) => eventWriter.startStream(database, sessionId),
    drop: (sessionId) => eventWriter.dropStream(sessionId),
    onStreamError: (error, sessionId, on) =>
      app.log.warn(
        { err: error, sessionId },
        on
          ? "sessionEvents turned on, but its stored messages could not be written to its stream now (Redis unreachable?): its next run writes them"
          : "sessionEvents turned off, but its stream could not be dropped now (Redis unreachable?): nobody can read it, and it expires",
      ),
  });
  const reachable = servicesReachable(database, redis);
  /** Stopping (or about to): `/healthz` says 503 from now on. */
  let draining = false;
  const app = buildApi({
    service,
    deletions,
    sessionEvents,
    auth,
    idempotency: new IdempotencyStore(database),
    ...limiters,
    admin: adminBoard([...queues.all(), webhookQueue]),
    console: consolePages(),
    registry: metrics.registry,
    metrics,
    events,
    logLevel: config.logLevel,
    requestTimeoutMs: config.apiRequestTimeoutMs,
    answerStallMs: config.events.stallMs,
    resultsReadsPerTenant: config.resultsMaxReadsPerTenant,
    bigBodies: config.apiBigBodies,
    authFailures: config.apiAuthFailures ? new AuthFailureLimiter(config.apiAuthFailures) : undefined,
    trustProxy: config.apiTrustProxy,
    healthy: async () => !draining && (await reachable()),
    version: packageVersion(),
    ...webhookSecretRoutes(config.webhooks, new WebhookSecretGenerations(database)),
  });
  // Its stop closes idle connections at once and busy ones after a bounded wait (api-stop.ts).
  const connections = new ServerConnections(app.server);
  // One line when Redis goes and one when it is back, as workers and the sweeper say it.
  new RedisOutageLog(app.log).watch(redis);
  const stopEvictionWatch = await checkEvictionPolicy(
    redis,
    app.log,
    metrics.redisEvictionPolicySafe,
    config.evictionCheckMs,
  );
  if (bootstrapWarning) app.log.warn(bootstrapWarning);
  if (!anyKey) {
    app.log.info(
      `no API key exists: serving without authentication, as tenant "default", on ${config.host} only; ` +
        "`fleet keys create --tenant NAME` turns authentication on",
    );
  }
  const close = () => {
    draining = true;
    stopEvictionWatch();
    return closeAll(
      [
        () => closeServerWithin(() => app.close(), connections, app.log),
        // Reads cut by the stop gave their leases back; any left lapse within LEASE_TTL_MS.
        async () => limiters.tenantSlots.stop(),
        () => queues.close(),
        () => webhookQueue.close(),
        () => closeRedis(redis),
        () => database.close(),
      ],
      app.log,
    );
  };
  const listenPort = options.port ?? config.port;
  try {
    await app.listen({ port: listenPort, host: config.host });
  } catch (error) {
    // A port in use (or a HOST it cannot listen on) ends the start with one line naming it, and nothing left open.
    await close();
    throw listenError(error, { ...API_LISTEN, host: config.host, port: listenPort });
  }
  const address = app.server.address();
  const port = typeof address === "object" && address ? address.port : config.port;
  return {
    port,
    url: localUrl(config.host, port),
    devMode: !anyKey,
    drain: () => {
      draining = true;
    },
    stop: close,
  };
}
