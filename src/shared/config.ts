/**
 * Configuration, parsed once from the environment (a `.env` file in the working directory
 * is honoured). Nothing else in the code base reads `process.env`, but for the model
 * providers, which look at the variables the SDKs themselves read (to neutralise them and to
 * scrub their values out of error texts), and FLEET_DEBUG in cli.ts.
 *
 * The variables, their checks and defaults are config-schema.ts; reading the process
 * environment (with `.env`) is process-env.ts.
 */
import { isIP } from "node:net";
import { resolve } from "node:path";
import type { z } from "zod";
import { parseAllowedBaseUrls } from "./allowed-base-urls.js";
import { envSchema, NUMBER_VARIABLES } from "./config-schema.js";
import { ValidationError } from "./errors.js";
import { type ModelRouting, parseModelEndpoints } from "./model-endpoints.js";
import { type PriceTable, parsePrices } from "./prices.js";
import { readProcessEnv } from "./process-env.js";
import {
  type GateTuning,
  gateTuningFromEnv,
  parseTenantShares,
  type TenantShares,
} from "./provider-limits.js";
import { isClusterUrl } from "./redis.js";
import { type WebhookSettings, webhookSettingsFromEnv } from "./webhooks.js";

export { CONFIG_VARIABLES, DEFAULT_SESSION_MAX_QUEUED_RUNS } from "./config-schema.js";
export { readProcessEnv } from "./process-env.js";

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
  /** Provider-limit tuning: FLEET_ENDPOINT_MAX_WAIT_MS, _PERMIT_TTL_MS, _DEFAULT_PAUSE_MS (provider-limits.ts). */
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
  /** How often every role reads Redis's maxmemory-policy again, after its start. */
  evictionCheckMs: number;
};

/**
 * `env` without its blank number variables (NUMBER_VARIABLES): those get their defaults. One
 * that is no number is refused here, with its value: zod said "expected number, received NaN".
 */
function withoutBlankNumbers(env: Record<string, string | undefined>): Record<string, string | undefined> {
  for (const name of NUMBER_VARIABLES) {
    const value = env[name];
    if (value !== undefined && value.trim() !== "" && Number.isNaN(Number(value)))
      throw new ValidationError(name, `expected a number, got ${JSON.stringify(value)}`);
  }
  const blank = NUMBER_VARIABLES.filter((name) => env[name] !== undefined && env[name]!.trim() === "");
  if (blank.length === 0) return env;
  const copy = { ...env };
  for (const name of blank) delete copy[name];
  return copy;
}

/**
 * A database name spelled with percent-encoding is refused: postgres.js connects to it as the
 * URL spells it (`my%20db`), undecoded, while `fleet migrate` created it decoded (`my db`),
 * then failed (exit 1) with the database left behind.
 */
function checkDatabaseName(url: string): void {
  const spelled = new URL(url).pathname.slice(1);
  if (!spelled.includes("%")) return;
  let name = spelled;
  try {
    name = decodeURIComponent(spelled);
  } catch {}
  throw new ValidationError(
    "DATABASE_URL",
    `the database name ${JSON.stringify(name)} needs percent-encoding in a URL, which postgres.js does not decode: name the database with letters, digits, '_', '-' and '.' only`,
  );
}

/** Parses the environment once per call site that owns a process; pass `env` in tests. */
export function loadConfig(env: Record<string, string | undefined> = readProcessEnv()): FleetConfig {
  const result = envSchema.safeParse(withoutBlankNumbers(env));
  if (!result.success) {
    const issue = result.error.issues[0]!;
    throw new ValidationError(String(issue.path[0] ?? "environment"), issue.message);
  }
  const e = result.data;
  checkDatabaseName(e.DATABASE_URL);
  // 0 means "no limit" for FLEET_TOOL_TIMEOUT_MS and DATABASE_SILENCE_MS; here it was raised to
  // the floor of 1000 without a word: every model request cut after 1 s, or 1,000 characters.
  for (const name of ["FLEET_MODEL_STEP_TIMEOUT_MS", "FLEET_MODEL_MAX_OUTPUT_CHARS"] as const)
    if (e[name] === 0)
      throw new ValidationError(
        name,
        "0 is no limit, and a model request always has one: give at least 1000 (a smaller value is raised to 1000)",
      );
  let redisCluster: boolean;
  try {
    redisCluster = isClusterUrl(e.REDIS_URL);
  } catch (error) {
    throw new ValidationError("REDIS_URL", (error as Error).message);
  }
  return {
    databaseUrl: e.DATABASE_URL,
    redisUrl: e.REDIS_URL,
    redisCluster,
    prefix: redisCluster && !e.FLEET_PREFIX.startsWith("{") ? `{${e.FLEET_PREFIX}}` : e.FLEET_PREFIX,
    port: e.PORT,
    host: e.HOST,
    bootstrapKey: e.FLEET_BOOTSTRAP_KEY || undefined,
    tenantLimits: {
      maxActiveSessions: e.FLEET_TENANT_MAX_ACTIVE_SESSIONS || undefined,
      maxQueuedRuns: e.FLEET_SESSION_MAX_QUEUED_RUNS || undefined,
      requestRate:
        e.FLEET_TENANT_REQUESTS_PER_SECOND > 0
          ? {
              perSecond: e.FLEET_TENANT_REQUESTS_PER_SECOND,
              burst:
                e.FLEET_TENANT_REQUEST_BURST ??
                Math.max(1, Math.ceil(2 * e.FLEET_TENANT_REQUESTS_PER_SECOND)),
            }
          : undefined,
    },
    fairDispatch: e.FLEET_FAIR_DISPATCH === "on",
    tenantShares: parseTenantShares(e.FLEET_TENANT_SHARES),
    webhooks: webhookSettingsFromEnv(env),
    gateTuning: gateTuningFromEnv(env),
    metricsPort: e.METRICS_PORT,
    toolDir: resolve(e.FLEET_TOOL_DIR),
    workerConcurrency: Math.max(1, e.WORKER_CONCURRENCY),
    workerResumeConcurrency: Math.max(1, e.WORKER_RESUME_CONCURRENCY ?? e.WORKER_CONCURRENCY),
    workerFetchers: e.WORKER_FETCHERS,
    workerGatherMs: e.WORKER_GATHER_MS,
    apiRequestTimeoutMs: Math.max(1_000, e.FLEET_API_REQUEST_TIMEOUT_MS),
    apiDrainMs: e.FLEET_API_DRAIN_MS,
    apiAuthFailures:
      e.FLEET_API_AUTH_FAILURES_PER_MINUTE > 0
        ? { perMinute: e.FLEET_API_AUTH_FAILURES_PER_MINUTE, burst: e.FLEET_API_AUTH_FAILURE_BURST }
        : undefined,
    apiBigBodies: { max: e.FLEET_API_MAX_BIG_BODIES, waiting: e.FLEET_API_BIG_BODIES_WAITING },
    apiTrustProxy: parseTrustProxy(e.FLEET_API_TRUST_PROXY),
    historyCacheBytes: Math.floor(e.FLEET_HISTORY_CACHE_MB * 1024 * 1024),
    modelStepTimeoutMs: Math.max(1_000, e.FLEET_MODEL_STEP_TIMEOUT_MS),
    modelMaxOutputChars: Math.max(1_000, e.FLEET_MODEL_MAX_OUTPUT_CHARS),
    workerDbPool: Math.max(2, e.WORKER_DB_POOL),
    databaseSilenceMs: e.DATABASE_SILENCE_MS,
    workerDbRideoutMs: e.FLEET_WORKER_DB_RIDEOUT_MS,
    leaseTtlMs: Math.max(500, e.LEASE_TTL_MS),
    shutdownGraceMs: e.SHUTDOWN_GRACE_MS,
    sweepIntervalMs: Math.max(20, e.SWEEP_INTERVAL_MS),
    sweeperMaxAttempts: e.SWEEPER_MAX_ATTEMPTS,
    sweeperBackoffMs: e.SWEEPER_BACKOFF_MS,
    runStuckAfterMs: e.FLEET_RUN_STUCK_AFTER_MS,
    retention: {
      maxIdleMs: e.FLEET_RETENTION_DAYS > 0 ? Math.round(e.FLEET_RETENTION_DAYS * 86_400_000) : null,
      chunk: e.FLEET_RETENTION_CHUNK,
      intervalMs: e.FLEET_RETENTION_INTERVAL_MS,
    },
    logLevel: e.LOG_LEVEL,
    models: {
      endpoints: parseModelEndpoints(e.FLEET_MODEL_ENDPOINTS, env),
      allowedBaseUrls: parseAllowedBaseUrls(e.FLEET_ALLOWED_BASE_URLS),
      apiKeys: { openai: e.OPENAI_API_KEY || undefined, anthropic: e.ANTHROPIC_API_KEY || undefined },
      // Carried with the routing to the workers (create-model.ts) and the API (fleet-service.ts).
      prices: parsePrices(e.FLEET_PRICES),
    },
    events: {
      enabled: e.FLEET_EVENTS === "on",
      maxEvents: e.FLEET_EVENTS_MAX,
      maxAgeMs: e.FLEET_EVENTS_MAX_AGE_MS,
      maxBytes: e.FLEET_EVENTS_MAX_BYTES,
      maxStreamsPerTenant: e.FLEET_SSE_MAX_STREAMS_PER_TENANT,
      heartbeatMs: e.FLEET_SSE_HEARTBEAT_MS,
      stallMs: e.FLEET_SSE_STALL_MS,
    },
    transcriptDir: e.FLEET_TRANSCRIPT_DIR ? resolve(e.FLEET_TRANSCRIPT_DIR) : undefined,
    transcriptSweepMs: e.FLEET_TRANSCRIPT_SWEEP_MS,
    hookTimeoutMs: e.FLEET_HOOK_TIMEOUT_MS,
    migrateLockTimeoutMs: e.FLEET_MIGRATE_LOCK_TIMEOUT_MS,
    newerAgentWaitMs: e.FLEET_NEWER_AGENT_WAIT_MS,
    preflightTimeoutMs: e.FLEET_PREFLIGHT_TIMEOUT_MS,
    toolTimeoutMs: e.FLEET_TOOL_TIMEOUT_MS,
    evictionCheckMs: e.FLEET_EVICTION_CHECK_MS,
  };
}

/** FLEET_API_TRUST_PROXY as Fastify's `trustProxy`: false (default), true, hops, or addresses. */
export function parseTrustProxy(value: string | undefined): boolean | number | string {
  const v = (value ?? "").trim();
  if (v === "" || v.toLowerCase() === "false") return false;
  if (v.toLowerCase() === "true") return true;
  if (/^\d+$/.test(v)) return Number(v);
  // Checked here as Fastify's proxy-addr reads it, so that a typo stops the start naming the
  // variable (exit 2) rather than Fastify's `invalid IP address: …` with no name (exit 1).
  for (const entry of v.split(",").map((it) => it.trim()))
    if (!isProxyAddress(entry))
      throw new ValidationError(
        "FLEET_API_TRUST_PROXY",
        `${JSON.stringify(entry)} is no proxy address: give true, a number of hops, or a comma-separated list of addresses and CIDRs (10.0.0.0/8, ::1, loopback)`,
      );
  return v;
}

/** One entry of a trusted-proxy list: loopback/linklocal/uniquelocal, an IP, or IP/prefix (IPv4 also IP/netmask). */
function isProxyAddress(entry: string): boolean {
  if (["loopback", "linklocal", "uniquelocal"].includes(entry)) return true;
  const slash = entry.lastIndexOf("/");
  const kind = isIP(slash < 0 ? entry : entry.slice(0, slash));
  if (kind === 0) return false;
  if (slash < 0) return true;
  const range = entry.slice(slash + 1);
  if (/^\d+$/.test(range)) return Number(range) > 0 && Number(range) <= (kind === 4 ? 32 : 128);
  if (kind !== 4 || isIP(range) !== 4) return false;
  const mask = range.split(".").reduce((bits, octet) => (bits << 8) | Number(octet), 0) >>> 0;
  return mask !== 0 && ((~mask >>> 0) & ((~mask >>> 0) + 1)) === 0;
}
