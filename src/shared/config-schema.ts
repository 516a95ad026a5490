/**
 * The environment variables the configuration reads (config.ts `loadConfig`), each with its
 * check and default: one zod object, what test/deploy-files.test.ts and the README's table
 * are checked against.
 */
import { z } from "zod";
import { int, port, postgresUrl, redisUrl, timerMs } from "./config-fields.js";

export { MAX_TIMER_MS, whyUrlDoesNotParse } from "./config-fields.js";

/** FLEET_SESSION_MAX_QUEUED_RUNS's default: plenty for a person or a script that sends ahead. */
export const DEFAULT_SESSION_MAX_QUEUED_RUNS = 20;
export const envSchema = z.object({
  /** Postgres. Default: the local server, database `agent_fleet`. */
  DATABASE_URL: postgresUrl.default("postgres://postgres@127.0.0.1:5432/agent_fleet"),
  /**
   * Redis. Default: the local server. A Redis Cluster is named by its seed nodes:
   * `redis+cluster://[user:password@]host:port[,host:port...]` (`rediss+cluster://`: TLS).
   */
  REDIS_URL: redisUrl.default("redis://127.0.0.1:6379"),
  /**
   * Namespaces every Redis key and queue, so several fleets or test runs share one Redis.
   * It may begin with a hash tag, `{name}` or `{name}rest`; on a Redis Cluster one without is
   * used as `{FLEET_PREFIX}`, so every key of the fleet hashes to one slot (redis.ts).
   */
  FLEET_PREFIX: z
    .string()
    .regex(
      /^(\{[A-Za-z0-9_.-]+\})?[A-Za-z0-9_.-]*$/,
      "letters, digits, '_', '.' and '-' only, optionally after a hash tag in braces: {name}",
    )
    .refine((prefix) => prefix.length > 0, "must not be empty")
    .default("fleet"),
  /** The HTTP API's port. */
  PORT: port(3000),
  /**
   * The address the HTTP API listens on. Loopback by default: with no API key stored the API
   * serves without authentication only on a loopback address (contracts §10).
   */
  HOST: z.string().min(1).default("127.0.0.1"),
  /**
   * A key (at least 32 characters) the API stores for tenant `default` at start when no key
   * exists yet: how a deployment (docker compose) gets its first key without a shell.
   */
  FLEET_BOOTSTRAP_KEY: z.string().optional(),
  /**
   * Sessions one tenant may have active (a run queued or running) at once; a request that
   * would go past it answers 429 with Retry-After (contracts §10). Unset or 0: no cap.
   */
  FLEET_TENANT_MAX_ACTIVE_SESSIONS: int(0),
  /**
   * Runs with new input one session may have waiting to start (each holds its input until a
   * worker takes it); one more answers 429 `queued_runs`. 0: no bound.
   */
  FLEET_SESSION_MAX_QUEUED_RUNS: int(DEFAULT_SESSION_MAX_QUEUED_RUNS),
  /** Requests a second one tenant may make to the API, fleet-wide (429 beyond). Unset or 0: no cap. */
  FLEET_TENANT_REQUESTS_PER_SECOND: z.coerce.number().nonnegative().default(0),
  /** Requests a tenant may make at once before FLEET_TENANT_REQUESTS_PER_SECOND applies. Default: 2 s worth. */
  FLEET_TENANT_REQUEST_BURST: z.coerce.number().int().positive().optional(),
  /**
   * `on`: new runs are queued with per-tenant fair priorities, so one tenant's large batch
   * does not starve another tenant's sessions (fair-dispatch.ts). `off`: first in, first out.
   */
  FLEET_FAIR_DISPATCH: z.enum(["on", "off"]).default("on"),
  /** Where workers and the sweeper serve /metrics; 0 picks a free port. */
  METRICS_PORT: port(0),
  /** Where the built-in file tools write. */
  FLEET_TOOL_DIR: z.string().default("./fleet-files"),
  /** Jobs with new work one worker process runs at once. */
  WORKER_CONCURRENCY: int(8),
  /**
   * Resumes one worker process runs at once, on slots of their own besides
   * WORKER_CONCURRENCY, so a crashed session never waits behind new work. Default: the same
   * as WORKER_CONCURRENCY.
   */
  WORKER_RESUME_CONCURRENCY: z.coerce.number().int().nonnegative().optional(),
  /**
   * BullMQ Workers each queue's slots are spread over (src/worker/fetchers.ts): each fetches
   * its jobs one at a time, side by side with the others. Default: one per 250 slots, 1–4.
   */
  WORKER_FETCHERS: z.coerce.number().int().positive().optional(),
  /**
   * How long a worker's write waits for other sessions' writes to share its statement or
   * script call (TurnBatch's gatherMs); 0: until the end of its event-loop turn only.
   */
  WORKER_GATHER_MS: z.coerce.number().int().min(0).max(50).default(2),
  /**
   * MB (estimated) of long histories a worker keeps from one job of a session to its next
   * (src/worker/history-cache.ts), so that the next claim reads only what came after; 0: none.
   */
  FLEET_HISTORY_CACHE_MB: z.coerce.number().min(0).default(64),
  /**
   * Postgres connections of one worker process. Its jobs share them (postgres.js pipelines
   * queries on a connection); a few connections beat one per job on a busy machine.
   */
  WORKER_DB_POOL: int(6),
  /**
   * How long a Postgres connection of the API, a worker or the sweeper may wait for an answer
   * with nothing back before it is taken for lost (src/shared/db/dead-links.ts); 0: never.
   */
  DATABASE_SILENCE_MS: timerMs(15_000),
  /**
   * How long a worker keeps a session whose write failed with Postgres unavailable, trying
   * the write again, before it gives up as before (src/worker/db-rideout.ts); 0: never rides out.
   */
  FLEET_WORKER_DB_RIDEOUT_MS: timerMs(30_000),
  /** Session lease TTL: a frozen worker's sessions, a dead API's tenant read slots lapse after it. */
  LEASE_TTL_MS: timerMs(5_000),
  /**
   * The longest one model request may stream (call-model.ts `maxStepMs`): a provider that
   * keeps sending a little forever ends the step like a broken stream.
   */
  FLEET_MODEL_STEP_TIMEOUT_MS: timerMs(600_000),
  /**
   * The most text one model request may stream (call-model.ts `maxOutputChars`): past it the
   * stream is cut, so a provider's 600 MB answer never reaches the store or blocks a worker.
   */
  FLEET_MODEL_MAX_OUTPUT_CHARS: int(4_000_000),
  /**
   * How long one run may go on on a worker before it ends `max_turns` (its session parked, as at
   * `maxTurns`; a new message or a resume continues it), checked before each model step: so a
   * tenant's run holds a worker slot at most this long plus one step and its tools. Counted per
   * worker job (a run handed back starts again). 0: no bound.
   */
  FLEET_RUN_MAX_MS: timerMs(0),
  /** How long a stopping worker lets running work finish before aborting it. */
  // At most the longest Node timer (2^31-1 ms) less 2 min: the grace and the deadlines after
  // it (shutdown.ts: up to grace + 26 s) are timers, and a longer one fires after 1 ms.
  SHUTDOWN_GRACE_MS: z.coerce.number().int().nonnegative().max(2_147_363_647).default(10_000),
  /** How often the sweeper looks for dead or frozen workers; other scans run every 5th tick. */
  SWEEP_INTERVAL_MS: timerMs(200),
  /** Automatic resumes of one session before it is parked. */
  SWEEPER_MAX_ATTEMPTS: int(5),
  /**
   * A running run whose session has had no append for longer than this counts as stuck
   * (run-progress.ts: fleet_runs_stuck, the sweeper's log, FleetRunStuck). Above the longest
   * a model step can go without one at the default timeouts (about 17 min) and a tool's
   * default time limit (FLEET_TOOL_TIMEOUT_MS, 10 min); a tool may have none.
   */
  FLEET_RUN_STUCK_AFTER_MS: z.coerce.number().int().positive().default(1_800_000),
  /** Wait before the second automatic resume of a session; doubles each time, capped at 60 s. */
  SWEEPER_BACKOFF_MS: timerMs(1_000),
  /**
   * Retention: sessions outside batches that nothing will act on (completed, parked,
   * cancelled, empty, imported and never run) idle this many days, and batches ended this
   * many days ago (with all their sessions), are deleted by the sweeper. Unset or 0: off
   * (everything is kept). Fractions are allowed (0.5 = 12 h). At most 1,000,000: a cutoff
   * before 4713 BC failed every retention pass in Postgres, batch deletions' finishing too.
   */
  FLEET_RETENTION_DAYS: z.coerce
    .number()
    .nonnegative()
    .max(1_000_000, "must be at most 1000000 days (2,700 years); 0 keeps everything")
    .default(0),
  /** Sessions retention deletes per statement (each statement its own transaction). */
  FLEET_RETENTION_CHUNK: z.coerce.number().int().min(1).max(10_000).default(200),
  /** How often a sweeper runs a retention pass (each pass deletes at most 20 chunks). */
  // 0 is refused: it read as "no interval", a retention pass every 50 ms.
  FLEET_RETENTION_INTERVAL_MS: timerMs(60_000, true),
  /** pino level: fatal, error, warn, info, debug, trace, silent. */
  LOG_LEVEL: z.enum(["fatal", "error", "warn", "info", "debug", "trace", "silent"]).default("info"),
  OPENAI_API_KEY: z.string().optional(),
  ANTHROPIC_API_KEY: z.string().optional(),
  /**
   * Model endpoints the operator declares (contracts.md §11), a JSON object or the path of a
   * file holding one: `{ "NAME": { "provider": "openai" | "anthropic", "baseUrl"?, "apiKeyEnv"? } }`.
   * The variables `apiKeyEnv` names are read here too.
   */
  FLEET_MODEL_ENDPOINTS: z.string().optional(),
  /**
   * `off`: the scripted model (contracts §5), which costs no provider anything, is refused at the
   * API (400 naming `….provider`) and a worker fails a stored session's run on it instead of
   * running it, so a tenant cannot hold worker slots with it for free. Default `on`.
   */
  FLEET_SCRIPTED_MODEL: z.enum(["on", "off"]).default("on"),
  /**
   * The longest `delayMs` a scripted step may have: a longer one is a 400 naming the step at the
   * API, and a worker holds a stored one to it. Default 600000 (what the step schema allows).
   */
  FLEET_SCRIPTED_MAX_DELAY_MS: z.coerce.number().int().nonnegative().max(600_000).default(600_000),
  /** Comma-separated URL prefixes a MODEL may name as a raw `baseUrl` (no key is ever sent there). */
  FLEET_ALLOWED_BASE_URLS: z.string().optional(),
  /**
   * Model prices (prices.ts), a JSON object or the path of a file holding one:
   * `{ "MODEL": { "input", "output", "cacheRead"?, "cacheWrite"? } }` in USD per million tokens.
   */
  FLEET_PRICES: z.string().optional(),
  /**
   * Tenants' shares of a limited endpoint (contracts §15), JSON `{ "TENANT": weight }`; a tenant
   * not named has weight 1 (equal shares by default).
   */
  FLEET_TENANT_SHARES: z.string().optional(),
  /** `off`: workers and sweepers write no session events (contracts §7), e.g. to measure their cost. */
  FLEET_EVENTS: z.enum(["on", "off"]).default("on"),
  /** Events kept per session: about this many (MAXLEN ~) … */
  FLEET_EVENTS_MAX: z.coerce.number().int().positive().default(10_000),
  /** … and none older than this (ms); an id older than what is kept answers 410 `expired`. */
  FLEET_EVENTS_MAX_AGE_MS: z.coerce
    .number()
    .int()
    .positive()
    .default(24 * 3600 * 1000),
  /** … and at most this many bytes of events per session stream (the newest event is always kept). */
  FLEET_EVENTS_MAX_BYTES: z.coerce
    .number()
    .int()
    .positive()
    .default(16 * 1024 * 1024),
  /** Event streams one tenant may hold open across all API processes (Redis leases); more: 429. */
  FLEET_SSE_MAX_STREAMS_PER_TENANT: z.coerce.number().int().positive().default(100),
  /**
   * Batch results reads (`GET /v1/batches/:id/results`) one tenant may hold open at once across
   * the fleet's API processes (leases in Redis, LEASE_TTL_MS), each with a page of results (up
   * to 8 MiB) in memory; more answer 429.
   */
  FLEET_RESULTS_MAX_READS_PER_TENANT: z.coerce.number().int().positive().default(8),
  /** How often an idle event stream sends a comment line, so proxies and clients keep it open. */
  FLEET_SSE_HEARTBEAT_MS: timerMs(15_000, true),
  /**
   * How long an event stream waits for a reader that reads nothing (its socket not drained)
   * before it closes the connection, freeing the tenant's slot (event-stream-drain.ts).
   */
  FLEET_SSE_STALL_MS: timerMs(60_000, true),
  /** How long a request to the API may take to arrive, headers and body; later: 408, connection closed. */
  FLEET_API_REQUEST_TIMEOUT_MS: timerMs(120_000, true),
  FLEET_API_DRAIN_MS: timerMs(0),
  /**
   * Failed authentications (401) one client address may have a minute on one API process;
   * past them its requests answer 429 without a key look-up (auth-failures.ts). 0: no limit.
   */
  FLEET_API_AUTH_FAILURES_PER_MINUTE: z.coerce.number().nonnegative().default(60),
  /** Failed authentications one client address may have at once before the rate applies. */
  FLEET_API_AUTH_FAILURE_BURST: z.coerce.number().int().positive().default(30),
  /**
   * Which proxies' X-Forwarded-For names the client (the address failed authentications count
   * under): unset or `false`, none (the connection's address); `true`, any; a number, that many
   * hops; else a comma-separated list of addresses or CIDRs (Fastify's `trustProxy`).
   */
  FLEET_API_TRUST_PROXY: z.string().optional(),
  FLEET_API_MAX_BIG_BODIES: z.coerce.number().int().positive().default(2),
  FLEET_API_BIG_BODIES_WAITING: z.coerce.number().int().nonnegative().default(8),
  /** Enables the built-in `transcript` extension: one JSONL file per session in this directory. */
  FLEET_TRANSCRIPT_DIR: z.string().optional(),
  /** How often a worker removes the transcripts of sessions deleted while it did not hear of it. */
  FLEET_TRANSCRIPT_SWEEP_MS: timerMs(3_600_000, true),
  /**
   * How long one tool call may run before its signal is aborted and it is answered as failed
   * (worker/tools/time-limit.ts); a tool's own `timeoutMs` replaces it; 0: no limit. At most
   * the longest delay a Node timer takes.
   */
  FLEET_TOOL_TIMEOUT_MS: timerMs(600_000),
  /**
   * How long a run whose stored agent this worker cannot read only because a newer release
   * wrote it (a rolling deploy) is handed back for a newer worker before its session is parked
   * `invalid_agent` (worker/newer-agent-wait.ts); 0: parked at once.
   */
  FLEET_NEWER_AGENT_WAIT_MS: timerMs(900_000),
  /**
   * How long each attempt of `fleet migrate` (and `fleet up`'s) waits for a lock a migration
   * needs before it tries again (db/migration-locks.ts): the statements queued behind its
   * wait run in between. Five attempts, then it fails naming what holds the lock.
   */
  FLEET_MIGRATE_LOCK_TIMEOUT_MS: timerMs(5_000, true),
  /** How long one extension hook may take before the run stops waiting for it (a failure). */
  FLEET_HOOK_TIMEOUT_MS: timerMs(30_000, true),
  /**
   * How long a start's check of Postgres and Redis (preflight.ts) waits for a connection and
   * for each answer before it exits 2 naming the service: a Redis that accepts connections
   * but answers nothing (frozen) takes this long to be told from a slow one. Longer for a
   * distant or TLS-proxied service; shorter for a supervisor that restarts fast. At most 10 min.
   */
  FLEET_PREFLIGHT_TIMEOUT_MS: z.coerce.number().int().positive().max(600_000).default(5_000),
  /** How often every role reads Redis's maxmemory-policy again (eviction-policy.ts). */
  FLEET_EVICTION_CHECK_MS: timerMs(60_000, true),
  /**
   * How long `fleet worker`'s event loop may go without turning before its watchdog thread ends
   * the process by SIGALRM (worker/loop-watchdog.ts); 0: no watchdog.
   */
  FLEET_WORKER_BLOCKED_EXIT_MS: timerMs(30_000).refine(
    (ms) => ms === 0 || ms >= 3_000,
    "0 (no watchdog) or at least 3000: the loop's heartbeat comes every second",
  ),
});

/** The variables the schema reads (test/readme-config.test.ts checks the README's table against them). */
export const CONFIG_VARIABLES: readonly string[] = Object.keys(envSchema.shape);

/** A schema's own type under its `.default()` / `.optional()` wrappers. */
function innerType(schema: z.ZodType): string {
  let def = (schema as unknown as { _zod: { def: { type: string; innerType?: z.ZodType } } })._zod.def;
  while (def.innerType) def = (def.innerType as unknown as { _zod: { def: typeof def } })._zod.def;
  return def.type;
}

/**
 * The variables read as numbers. Set but blank (`PORT=` in a .env) each is taken as unset, so
 * it gets its default: zod's coercion read "" as 0 (an API on a free port, no tool time limit).
 */
export const NUMBER_VARIABLES: readonly string[] = Object.entries(envSchema.shape)
  .filter(([, schema]) => innerType(schema) === "number")
  .map(([name]) => name);
