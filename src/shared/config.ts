/**
 * Configuration, parsed once from the environment (a `.env` file in the working directory
 * is honoured). Nothing else in the code base reads `process.env`, but for the model
 * providers, which look at the variables the SDKs themselves read (to neutralise them and to
 * scrub their values out of error texts), and FLEET_DEBUG in cli.ts.
 *
 * The variables, their checks and defaults are config-schema.ts; reading the process
 * environment (with `.env`) is process-env.ts; the FleetConfig it gives is fleet-config.ts, and
 * FLEET_API_TRUST_PROXY's check trust-proxy.ts.
 */
import { resolve } from "node:path";
import { parseAllowedBaseUrls } from "./allowed-base-urls.js";
import { envSchema, NUMBER_VARIABLES } from "./config-schema.js";
import { ValidationError } from "./errors.js";
import type { FleetConfig } from "./fleet-config.js";
import { misspelledVariables } from "./misspelled-variables.js";
import { parseModelEndpoints } from "./model-endpoints.js";
import { parsePrices } from "./prices.js";
import { readProcessEnv } from "./process-env.js";
import { gateTuningFromEnv, parseTenantShares } from "./provider-limits.js";
import { isClusterUrl } from "./redis.js";
import { parseTrustProxy } from "./trust-proxy.js";
import { webhookSettingsFromEnv } from "./webhooks.js";

export { CONFIG_VARIABLES, DEFAULT_SESSION_MAX_QUEUED_RUNS } from "./config-schema.js";
export type { FleetConfig } from "./fleet-config.js";
export { misspelledVariables } from "./misspelled-variables.js";
export { readProcessEnv } from "./process-env.js";
export { parseTrustProxy } from "./trust-proxy.js";

/**
 * A number as an operator writes one: decimal, with a fraction or an exponent, spaces around.
 * Number() also read `0x10` as 16 and `0b101` as 5 (LEASE_TTL_MS=0b101 then raised to 500 in
 * silence), and `1e309` as Infinity.
 */
const DECIMAL = /^\s*[+-]?(\d+\.?\d*|\.\d+)(e[+-]?\d+)?\s*$/i;

/**
 * `env` without its blank number variables (NUMBER_VARIABLES): those get their defaults. One
 * that is no number is refused here, with its value: zod said "expected number, received NaN".
 */
function withoutBlankNumbers(env: Record<string, string | undefined>): Record<string, string | undefined> {
  for (const name of NUMBER_VARIABLES) {
    const value = env[name];
    if (
      value !== undefined &&
      value.trim() !== "" &&
      !(DECIMAL.test(value) && Number.isFinite(Number(value)))
    )
      throw new ValidationError(name, `expected a number, got ${JSON.stringify(value)}`);
  }
  const blank = NUMBER_VARIABLES.filter((name) => env[name] !== undefined && env[name]!.trim() === "");
  if (blank.length === 0) return env;
  const copy = { ...env };
  for (const name of blank) delete copy[name];
  return copy;
}

/**
 * A template database (template0, template1) is refused, and so is a database name spelled
 * with percent-encoding: postgres.js connects to it as the
 * URL spells it (`my%20db`), undecoded, while `fleet migrate` created it decoded (`my db`),
 * then failed (exit 1) with the database left behind.
 */
function checkDatabaseName(url: string): void {
  const spelled = new URL(url).pathname.slice(1);
  // `fleet migrate` applied the fleet's schema to template1, which every later CREATE
  // DATABASE on that server copies (test/config-template-database.test.ts).
  if (spelled === "template0" || spelled === "template1") {
    const example = new URL(url);
    example.pathname = "/agent_fleet";
    example.password = example.password ? "***" : "";
    throw new ValidationError(
      "DATABASE_URL",
      `"${spelled}" is a template Postgres copies into every new database: give the fleet a database of its own, e.g. ${example}`,
    );
  }
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

let misspellingsSaid = false;

/**
 * Parses the environment once per call site that owns a process; pass `env` in tests. Read
 * from the process, a FLEET_* variable spelled near a real one is named on stderr, once per
 * process (misspelled-variables.ts): the command goes on, on the default.
 */
export function loadConfig(env?: Record<string, string | undefined>): FleetConfig {
  if (env === undefined) {
    env = readProcessEnv();
    if (!misspellingsSaid) {
      misspellingsSaid = true;
      for (const line of misspelledVariables(env))
        console.error(`fleet ${process.argv[2] ?? ""}: warning: ${line}`);
    }
  }
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
    resultsMaxReadsPerTenant: e.FLEET_RESULTS_MAX_READS_PER_TENANT,
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
      scripted: { enabled: e.FLEET_SCRIPTED_MODEL === "on", maxDelayMs: e.FLEET_SCRIPTED_MAX_DELAY_MS },
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
    runMaxMs: e.FLEET_RUN_MAX_MS,
    evictionCheckMs: e.FLEET_EVICTION_CHECK_MS,
    workerBlockedExitMs: e.FLEET_WORKER_BLOCKED_EXIT_MS,
  };
}
