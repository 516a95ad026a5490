/**
 * The README's configuration tables say what the configuration parser does: every variable
 * they name is read (config.ts, or webhooks.ts and provider-limit-settings.ts, which it calls), every
 * variable the parser reads is documented, and each default they give is what loadConfig({})
 * makes of an empty environment.
 */
import { readFileSync } from "node:fs";
import { join, resolve } from "node:path";
import { describe, expect, it } from "vitest";
import { CONFIG_VARIABLES, type FleetConfig, loadConfig } from "../src/shared/config.js";
import { ROOT } from "./support/fleet-env.js";

const readme = readFileSync(join(ROOT, "README.md"), "utf8");
const source = (file: string) => readFileSync(join(ROOT, "src/shared", file), "utf8");
/** Variables read outside the schema, by the functions loadConfig calls. */
const READ_ELSEWHERE = [source("webhooks.ts"), source("provider-limit-settings.ts")].join("\n");

/** The text of the README from `heading` to the next heading of its level or above. */
function section(heading: string): string {
  const start = readme.indexOf(`\n${heading}\n`);
  expect(start, heading).toBeGreaterThan(0);
  const level = heading.split(" ")[0]!.length;
  const rest = readme.slice(start + heading.length + 2);
  const end = rest.search(new RegExp(`^#{1,${level}} `, "m"));
  return end < 0 ? rest : rest.slice(0, end);
}

/** Each variable of the tables with the text its default cell gives it (`a`, `b` for two names). */
function documented(): Map<string, string> {
  const table = new Map<string, string>();
  const text = section("### Configuration") + section("#### Per-tenant limits and fair dispatch");
  for (const [, names, cell] of text.matchAll(/^\| ((?:`[A-Z][A-Z0-9_]+`(?:, )?)+) \| ([^|]*) \|/gm)) {
    const each = names!.match(/[A-Z][A-Z0-9_]+/g)!;
    const defaults = cell!.trim().split(/, (?=[`a-z0-9])/);
    // One default per name (`a`, `b`), or one for all of them (—).
    for (const [i, name] of each.entries())
      table.set(name, defaults.length === each.length ? defaults[i]! : cell!.trim());
  }
  return table;
}

/** A default cell as a value: `8` → 8, `on` → "on", none or — → undefined; other words as they are. */
function documentedValue(cell: string): unknown {
  const text = cell.replace(/\s*\(.*\)$/, "").trim();
  if (text === "none" || text === "—") return undefined;
  const quoted = /^`([^`]*)`$/.exec(text)?.[1] ?? text;
  return /^\d+$/.test(quoted) ? Number(quoted) : quoted;
}

/** What the parser made of each variable, in the README's terms. */
const PARSED: Record<string, (c: FleetConfig) => unknown> = {
  DATABASE_URL: (c) => c.databaseUrl,
  REDIS_URL: (c) => c.redisUrl,
  FLEET_PREFIX: (c) => c.prefix,
  PORT: (c) => c.port,
  HOST: (c) => c.host,
  FLEET_BOOTSTRAP_KEY: (c) => c.bootstrapKey,
  METRICS_PORT: (c) => c.metricsPort,
  FLEET_TOOL_DIR: (c) => (c.toolDir === resolve("./fleet-files") ? "./fleet-files" : c.toolDir),
  WORKER_CONCURRENCY: (c) => c.workerConcurrency,
  WORKER_RESUME_CONCURRENCY: (c) =>
    c.workerResumeConcurrency === c.workerConcurrency ? "= `WORKER_CONCURRENCY`" : c.workerResumeConcurrency,
  WORKER_FETCHERS: (c) => c.workerFetchers ?? "one per 250 slots, 1–4",
  WORKER_GATHER_MS: (c) => c.workerGatherMs,
  FLEET_HISTORY_CACHE_MB: (c) => c.historyCacheBytes / 1024 / 1024,
  WORKER_DB_POOL: (c) => c.workerDbPool,
  DATABASE_SILENCE_MS: (c) => c.databaseSilenceMs,
  LEASE_TTL_MS: (c) => c.leaseTtlMs,
  FLEET_MODEL_STEP_TIMEOUT_MS: (c) => c.modelStepTimeoutMs,
  FLEET_MODEL_MAX_OUTPUT_CHARS: (c) => c.modelMaxOutputChars,
  SHUTDOWN_GRACE_MS: (c) => c.shutdownGraceMs,
  SWEEP_INTERVAL_MS: (c) => c.sweepIntervalMs,
  SWEEPER_MAX_ATTEMPTS: (c) => c.sweeperMaxAttempts,
  SWEEPER_BACKOFF_MS: (c) => c.sweeperBackoffMs,
  FLEET_RUN_STUCK_AFTER_MS: (c) => c.runStuckAfterMs,
  FLEET_TOOL_TIMEOUT_MS: (c) => c.toolTimeoutMs,
  FLEET_WORKER_DB_RIDEOUT_MS: (c) => c.workerDbRideoutMs,
  LOG_LEVEL: (c) => c.logLevel,
  FLEET_EVENTS: (c) => (c.events.enabled ? "on" : "off"),
  FLEET_EVENTS_MAX: (c) => c.events.maxEvents,
  FLEET_EVENTS_MAX_AGE_MS: (c) => c.events.maxAgeMs,
  FLEET_EVENTS_MAX_BYTES: (c) => c.events.maxBytes,
  FLEET_API_AUTH_FAILURES_PER_MINUTE: (c) => c.apiAuthFailures?.perMinute,
  FLEET_API_AUTH_FAILURE_BURST: (c) => c.apiAuthFailures?.burst,
  FLEET_API_TRUST_PROXY: (c) => (c.apiTrustProxy === false ? undefined : c.apiTrustProxy),
  FLEET_API_REQUEST_TIMEOUT_MS: (c) => c.apiRequestTimeoutMs,
  FLEET_API_DRAIN_MS: (c) => c.apiDrainMs,
  FLEET_API_MAX_BIG_BODIES: (c) => c.apiBigBodies.max,
  FLEET_API_BIG_BODIES_WAITING: (c) => c.apiBigBodies.waiting,
  FLEET_RESULTS_MAX_READS_PER_TENANT: (c) => c.resultsMaxReadsPerTenant,
  FLEET_SSE_MAX_STREAMS_PER_TENANT: (c) => c.events.maxStreamsPerTenant,
  FLEET_SSE_HEARTBEAT_MS: (c) => c.events.heartbeatMs,
  FLEET_SSE_STALL_MS: (c) => c.events.stallMs,
  FLEET_TRANSCRIPT_DIR: (c) => c.transcriptDir,
  FLEET_TRANSCRIPT_SWEEP_MS: (c) => c.transcriptSweepMs,
  FLEET_EVICTION_CHECK_MS: (c) => c.evictionCheckMs,
  FLEET_HOOK_TIMEOUT_MS: (c) => c.hookTimeoutMs,
  FLEET_WORKER_BLOCKED_EXIT_MS: (c) => c.workerBlockedExitMs,
  FLEET_NEWER_AGENT_WAIT_MS: (c) => c.newerAgentWaitMs,
  FLEET_MIGRATE_LOCK_TIMEOUT_MS: (c) => c.migrateLockTimeoutMs,
  FLEET_PREFLIGHT_TIMEOUT_MS: (c) => c.preflightTimeoutMs,
  OPENAI_API_KEY: (c) => c.models.apiKeys.openai,
  ANTHROPIC_API_KEY: (c) => c.models.apiKeys.anthropic,
  FLEET_MODEL_ENDPOINTS: (c) => (c.models.endpoints.size === 0 ? undefined : c.models.endpoints),
  FLEET_ALLOWED_BASE_URLS: (c) =>
    c.models.allowedBaseUrls.length === 0 ? undefined : c.models.allowedBaseUrls,
  FLEET_PRICES: (c) => (Object.keys(c.models.prices).length === 0 ? undefined : c.models.prices),
  FLEET_TENANT_MAX_ACTIVE_SESSIONS: (c) => c.tenantLimits.maxActiveSessions,
  FLEET_SESSION_MAX_QUEUED_RUNS: (c) => c.tenantLimits.maxQueuedRuns,
  FLEET_TENANT_REQUESTS_PER_SECOND: (c) => c.tenantLimits.requestRate?.perSecond,
  FLEET_TENANT_REQUEST_BURST: (c) => c.tenantLimits.requestRate?.burst ?? "2 s worth",
  FLEET_FAIR_DISPATCH: (c) => (c.fairDispatch ? "on" : "off"),
  FLEET_TENANT_SHARES: (c) => (Object.keys(c.tenantShares).length === 0 ? "equal" : c.tenantShares),
  FLEET_WEBHOOK_SECRET: (c) => c.webhooks.secret,
  FLEET_WEBHOOK_ALLOWED_URLS: (c) => (c.webhooks.allowed.length === 0 ? undefined : c.webhooks.allowed),
  FLEET_WEBHOOK_DENY_PRIVATE: (c) => (c.webhooks.denyPrivate ? "on" : undefined),
  FLEET_WEBHOOK_SECRET_PER_TENANT: (c) => (c.webhooks.perTenant ? "on" : "off"),
  FLEET_WEBHOOK_SECRET_GRACE_MS: (c) => c.webhooks.rotationGraceMs,
  FLEET_WEBHOOK_RETRY_MS: (c) => c.webhooks.retryBaseMs,
  FLEET_WEBHOOK_LOCK_MS: (c) => c.webhooks.lockMs,
  FLEET_WEBHOOK_STALL_CHECK_MS: (c) => c.webhooks.stallCheckMs,
  FLEET_RETENTION_DAYS: (c) => (c.retention.maxIdleMs === null ? 0 : c.retention.maxIdleMs / 86_400_000),
  FLEET_RETENTION_CHUNK: (c) => c.retention.chunk,
  FLEET_RUN_MAX_MS: (c) => c.runMaxMs,
  FLEET_SCRIPTED_MODEL: (c) => (c.models.scripted?.enabled === false ? "off" : "on"),
  FLEET_SCRIPTED_MAX_DELAY_MS: (c) => c.models.scripted?.maxDelayMs,
  FLEET_RETENTION_INTERVAL_MS: (c) => c.retention.intervalMs,
};

describe("README configuration tables", () => {
  const table = documented();

  it("name every variable the parser reads, and only those", () => {
    expect(table.size).toBeGreaterThan(50);
    for (const name of CONFIG_VARIABLES)
      expect(table.has(name), `${name} is not in the README's table`).toBe(true);
    for (const name of table.keys())
      expect(
        CONFIG_VARIABLES.includes(name) || new RegExp(`\\b${name}\\b`).test(READ_ELSEWHERE),
        `${name} is documented but not read`,
      ).toBe(true);
  });

  it("give each variable the default an empty environment gets", () => {
    const config = loadConfig({});
    for (const [name, cell] of table) {
      const parsed = PARSED[name];
      expect(parsed, `${name}: say here how its parsed value reads`).toBeDefined();
      expect(parsed!(config), `${name}: the README says ${cell}`).toEqual(documentedValue(cell));
    }
  });
});

describe("a variable set but blank", () => {
  // `PORT=` in a .env, or `PORT: ${PORT}` in a compose file with PORT unset on the host. Before,
  // zod's coercion read "" as 0: the API listened on a free port (while `fleet batch …` went
  // to 3000), WORKER_CONCURRENCY fell to 1, FLEET_TOOL_TIMEOUT_MS and DATABASE_SILENCE_MS meant
  // "no limit", SWEEPER_MAX_ATTEMPTS 0. The FLEET_WEBHOOK_* variables already read blank as unset.
  it("gets its default, as when it is unset, for every variable whose default is a number", () => {
    const defaults = loadConfig({});
    const numeric = CONFIG_VARIABLES.filter((name) => typeof PARSED[name]?.(defaults) === "number");
    expect(numeric.length).toBeGreaterThan(30);
    for (const name of numeric)
      for (const blank of ["", "  "])
        expect(PARSED[name]!(loadConfig({ [name]: blank })), `${name}=${JSON.stringify(blank)}`).toEqual(
          PARSED[name]!(defaults),
        );
  });

  it("one that is not a number is said in those words, with the value given", () => {
    // Before: `fleet: PORT: Invalid input: expected number, received NaN` for PORT=abc.
    for (const [name, value] of <[string, string][]>[
      ["PORT", "abc"],
      ["WORKER_CONCURRENCY", "eight"],
      ["FLEET_TOOL_TIMEOUT_MS", "10m"],
    ])
      expect(() => loadConfig({ [name]: value }), name).toThrow(`expected a number, got "${value}"`);
  });

  it("one in hex, binary or octal notation, or infinite, is refused too; decimal with spaces or an exponent is taken", () => {
    // Number() read LEASE_TTL_MS=0b101 as 5 (then raised to 500 in silence), 0x10 as 16; and
    // 1e309 as Infinity, which zod called "expected number, received Infinity".
    for (const [name, value] of <[string, string][]>[
      ["LEASE_TTL_MS", "0b101"],
      ["WORKER_CONCURRENCY", "0x10"],
      ["FLEET_TOOL_TIMEOUT_MS", "0o17"],
      ["FLEET_HISTORY_CACHE_MB", "1e309"],
      ["FLEET_TENANT_REQUESTS_PER_SECOND", "Infinity"],
    ])
      expect(() => loadConfig({ [name]: value }), name).toThrow(`${name}: expected a number, got "${value}"`);
    expect(loadConfig({ WORKER_CONCURRENCY: " 5 " }).workerConcurrency).toBe(5);
    expect(loadConfig({ LEASE_TTL_MS: "1e4" }).leaseTtlMs).toBe(10_000);
    expect(loadConfig({ FLEET_HISTORY_CACHE_MB: "0.5" }).historyCacheBytes).toBe(524_288);
  });
});

describe("DATABASE_URL", () => {
  it("is refused, naming the database, when its database name is percent-encoded", () => {
    // postgres.js connects to the name as the URL spells it ("my%20db") while the fleet
    // decoded it to create the database: `fleet migrate` created "my db", then failed with
    // `database "my%20db" does not exist` (exit 1), the database left behind.
    for (const [url, name] of [
      ["postgres://postgres@127.0.0.1:5432/my%20db", "my db"],
      ["postgres://postgres@127.0.0.1:5432/flëet", "flëet"],
    ])
      expect(() => loadConfig({ DATABASE_URL: url! }), url).toThrow(
        `DATABASE_URL: the database name ${JSON.stringify(name)} needs percent-encoding in a URL`,
      );
    expect(loadConfig({ DATABASE_URL: "postgres://u@h:5432/agent-fleet_2.x" }).databaseUrl).toBe(
      "postgres://u@h:5432/agent-fleet_2.x",
    );
  });
});

describe("FLEET_API_TRUST_PROXY", () => {
  // Before, a value that is no address was taken as it was and handed to Fastify, so `fleet api`
  // stopped with `fleet: invalid IP address: garbage!` (exit 1), naming no variable.
  it("that names no proxy address is refused at start, naming the variable and the entry", () => {
    for (const [value, entry] of [
      ["garbage!", "garbage!"],
      ["10.0.0.1, proxy.internal", "proxy.internal"],
      ["10.0.0.0/33", "10.0.0.0/33"],
      ["10.0.0.0/0", "10.0.0.0/0"],
      ["10.0.0.0/255.0.255.0", "10.0.0.0/255.0.255.0"],
      ["::1/129", "::1/129"],
      ["-1", "-1"],
      ["10.0.0.1,", ""],
    ])
      expect(() => loadConfig({ FLEET_API_TRUST_PROXY: value! }), value).toThrow(
        `FLEET_API_TRUST_PROXY: ${JSON.stringify(entry)} is no proxy address`,
      );
  });

  it("takes what the README lists: true, a number of hops, addresses and CIDRs", () => {
    const parsed = (value: string) => loadConfig({ FLEET_API_TRUST_PROXY: value }).apiTrustProxy;
    expect(parsed("true")).toBe(true);
    expect(parsed("false")).toBe(false);
    expect(parsed("2")).toBe(2);
    for (const list of [
      "10.0.0.1",
      "10.0.0.0/8, 192.168.1.0/255.255.255.0",
      "::1,fd00::/8",
      "loopback, uniquelocal",
    ])
      expect(parsed(list)).toBe(list);
  });
});

describe("the bounds of a model request", () => {
  // FLEET_TOOL_TIMEOUT_MS=0 is no limit; FLEET_MODEL_STEP_TIMEOUT_MS=0 was silently raised to
  // 1000: a worker started with it cut every model request after 1 s (and
  // FLEET_MODEL_MAX_OUTPUT_CHARS=0 every answer after 1,000 characters).
  it("refuses 0, which reads as no limit, naming the variable", () => {
    for (const name of ["FLEET_MODEL_STEP_TIMEOUT_MS", "FLEET_MODEL_MAX_OUTPUT_CHARS"])
      expect(() => loadConfig({ [name]: "0" }), name).toThrow(
        `${name}: 0 is no limit, and a model request always has one`,
      );
  });

  it("raises a value under 1000 to 1000, as the README says", () => {
    const config = loadConfig({ FLEET_MODEL_STEP_TIMEOUT_MS: "10", FLEET_MODEL_MAX_OUTPUT_CHARS: "10" });
    expect([config.modelStepTimeoutMs, config.modelMaxOutputChars]).toEqual([1000, 1000]);
    expect(readme).toContain(
      "| `FLEET_MODEL_STEP_TIMEOUT_MS` | `600000` | the longest one model request may stream (at least 1000",
    );
    expect(readme).toContain(
      "| `FLEET_MODEL_MAX_OUTPUT_CHARS` | `4000000` | the most one model request may stream (at least 1000",
    );
  });
});

describe("FLEET_RETENTION_INTERVAL_MS", () => {
  // 0 was accepted and read as a pass every 50 ms (the sweeper's floor), which the README never said.
  it("refuses 0 naming the variable; a value under 50 is raised to 50, as the README says", () => {
    expect(() => loadConfig({ FLEET_RETENTION_INTERVAL_MS: "0" })).toThrow("FLEET_RETENTION_INTERVAL_MS");
    expect(readme).toContain("how often a sweeper runs a pass (at least 50: a smaller value is raised to 50");
  });
});
