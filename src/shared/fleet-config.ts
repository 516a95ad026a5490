/**
 * FleetConfig: the configuration loadConfig (config.ts) parses once from the environment, as
 * every role takes it. Its variables, their checks and defaults are config-schema.ts.
 */
import type { z } from "zod";
import type { envSchema } from "./config-schema.js";
import type { ModelRouting } from "./model-endpoints.js";
import type { PriceTable } from "./prices.js";
import type { GateTuning, TenantShares } from "./provider-limits.js";
import type { WebhookSettings } from "./webhooks.js";

export type FleetConfig = {
  databaseUrl: string;
  redisUrl: string;
  /** Whether REDIS_URL names a Redis Cluster (`redis+cluster://`). */
  redisCluster: boolean;
  /** The effective FLEET_PREFIX: hash-tagged (`{fleet}`) on a cluster. */
  prefix: string;
  port: number;
  /** FLEET_API_REQUEST_TIMEOUT_MS: how long a request to the API may take to arrive (at least 1 s). */
  apiRequestTimeoutMs: number;
  /**
   * FLEET_API_DRAIN_MS: after SIGTERM, how long the API goes on serving with `/healthz`
   * answering 503 before it stops taking connections (0: it stops at once).
   */
  apiDrainMs: number;
  /** Failed authentications per client address (auth-failures.ts); undefined: no limit. */
  apiAuthFailures: { perMinute: number; burst: number } | undefined;
  /** FLEET_RESULTS_MAX_READS_PER_TENANT: batch results reads one tenant may hold open on one API process. */
  resultsMaxReadsPerTenant: number;
  /** FLEET_API_MAX_BIG_BODIES, FLEET_API_BIG_BODIES_WAITING: request bodies of 1 MiB or more worked on at once, and waiting. */
  apiBigBodies: { max: number; waiting: number };
  /** FLEET_API_TRUST_PROXY as Fastify's `trustProxy` takes it. */
  apiTrustProxy: boolean | number | string;
  /** Where the HTTP API listens. */
  host: string;
  /** Stored for tenant `default` when no API key exists (api-keys.ts `bootstrap`). */
  bootstrapKey: string | undefined;
  /** Per-tenant limits (contracts §10); undefined: none. */
  tenantLimits: {
    maxActiveSessions: number | undefined;
    /** FLEET_SESSION_MAX_QUEUED_RUNS; undefined: no bound. */
    maxQueuedRuns: number | undefined;
    requestRate: { perSecond: number; burst: number } | undefined;
  };
  /** Whether new runs get per-tenant fair priorities. */
  fairDispatch: boolean;
  /** FLEET_TENANT_SHARES (provider-limits.ts): weights of tenants on limited endpoints. */
  tenantShares: TenantShares;
  /** Batch webhooks: FLEET_WEBHOOK_SECRET, _ALLOWED_URLS, _DENY_PRIVATE, _RETRY_MS, _LOCK_MS, _STALL_CHECK_MS (webhooks.ts). */
  webhooks: WebhookSettings;
  /** Provider-limit tuning: FLEET_ENDPOINT_MAX_WAIT_MS, _PERMIT_TTL_MS, _DEFAULT_PAUSE_MS, _MAX_PAUSE_MS (provider-limits.ts). */
  gateTuning: Partial<GateTuning>;
  metricsPort: number;
  toolDir: string;
  workerConcurrency: number;
  workerResumeConcurrency: number;
  /** WORKER_FETCHERS; undefined: per queue, from its concurrency (fetchers.ts). */
  workerFetchers: number | undefined;
  /** WORKER_GATHER_MS. */
  workerGatherMs: number;
  /** FLEET_HISTORY_CACHE_MB, in bytes. */
  historyCacheBytes: number;
  /** FLEET_MODEL_STEP_TIMEOUT_MS: the longest one model request may stream. */
  modelStepTimeoutMs: number;
  /** FLEET_MODEL_MAX_OUTPUT_CHARS: the most text one model request may stream. */
  modelMaxOutputChars: number;
  workerDbPool: number;
  /** DATABASE_SILENCE_MS: a connection silent this long while waiting is dropped (0: never). */
  databaseSilenceMs: number;
  /** FLEET_WORKER_DB_RIDEOUT_MS: how long a run's write is tried again while Postgres is unavailable (0: not at all). */
  workerDbRideoutMs: number;
  leaseTtlMs: number;
  shutdownGraceMs: number;
  sweepIntervalMs: number;
  sweeperMaxAttempts: number;
  sweeperBackoffMs: number;
  /** FLEET_RUN_STUCK_AFTER_MS: a running run with no append for longer is stuck. */
  runStuckAfterMs: number;
  /** FLEET_RETENTION_DAYS (null: off), _CHUNK, _INTERVAL_MS: what the sweeper deletes, how. */
  retention: { maxIdleMs: number | null; chunk: number; intervalMs: number };
  logLevel: z.infer<typeof envSchema>["LOG_LEVEL"];
  /** Endpoints, allowed raw base URLs and the keys for each (model-endpoints.ts). */
  models: ModelRouting & { prices: PriceTable };
  /** Session events (contracts §7): on/off, retention, SSE limits. */
  events: {
    enabled: boolean;
    maxEvents: number;
    maxAgeMs: number;
    /** Bytes of events kept per session stream (FLEET_EVENTS_MAX_BYTES). */
    maxBytes: number;
    maxStreamsPerTenant: number;
    heartbeatMs: number;
    /** FLEET_SSE_STALL_MS: a reader that has taken nothing for this long is closed. */
    stallMs: number;
  };
  /** The built-in transcript extension's directory (contracts §8); undefined: off. */
  transcriptDir: string | undefined;
  /** How often a worker's pass removes transcripts of sessions that no longer exist. */
  transcriptSweepMs: number;
  hookTimeoutMs: number;
  /** FLEET_MIGRATE_LOCK_TIMEOUT_MS: each attempt of a migration waits this long for a lock. */
  migrateLockTimeoutMs: number;
  /** FLEET_NEWER_AGENT_WAIT_MS: how long a newer release's agent waits for a worker that reads it (0: none). */
  newerAgentWaitMs: number;
  /** FLEET_PREFLIGHT_TIMEOUT_MS: a start's check of Postgres and Redis waits this long for each. */
  preflightTimeoutMs: number;
  /** FLEET_TOOL_TIMEOUT_MS: one tool call's time limit unless its tool has its own (0: none). */
  toolTimeoutMs: number;
  /** FLEET_RUN_MAX_MS: how long one run may go on on a worker before it ends `max_turns` (0: no bound). */
  runMaxMs: number;
  /** How often every role reads Redis's maxmemory-policy again, after its start. */
  evictionCheckMs: number;
  /** FLEET_WORKER_BLOCKED_EXIT_MS: `fleet worker` exits when its event loop has not turned this long (0: never). */
  workerBlockedExitMs: number;
};
