/**
 * The deployment files (Dockerfile, docker-compose.yml, deploy/) against the code they
 * deploy: real `fleet` subcommands, env var names that src/shared/config.ts knows (its
 * schema, src/shared/config-schema.ts), scrape ports that match the processes' ports, and a
 * dashboard that uses only the metric names of contracts.md §6. No Docker engine is needed;
 * when a `docker compose` CLI exists, the compose file is also validated by it.
 */
import { execFileSync, spawnSync } from "node:child_process";
import { existsSync, readdirSync, readFileSync, statSync } from "node:fs";
import { join, resolve } from "node:path";
import { describe, expect, it } from "vitest";
import { parse } from "yaml";
import { type FleetConfig, loadConfig } from "../src/shared/config.js";
import { exitDeadlineMs } from "../src/shared/shutdown.js";
import { metricNames } from "./support/promql.js";

const ROOT = resolve(import.meta.dirname, "..");
const read = (path: string) => readFileSync(join(ROOT, path), "utf8");

/** The compose services that run the fleet image, and the role each one runs. */
const OUR_SERVICES = ["migrate", "api", "worker", "sweeper"] as const;
/** Roles whose /metrics Prometheus scrapes: the API on PORT, the others on METRICS_PORT. */
const SCRAPED_SERVICES = ["api", "worker", "sweeper"] as const;

/** contracts.md §6, plus the series a histogram exports. */
const CONTRACT_METRICS = [
  "fleet_resumes_total",
  "fleet_resume_refusals_total",
  "fleet_runs_total",
  "fleet_model_stops_total",
  "fleet_tool_calls_total",
  "fleet_crash_to_resume_seconds",
  "fleet_fenced_writes_total",
  "fleet_sessions_parked_total",
  "fleet_queue_jobs",
  // contracts.md §15 (provider limits), and the declared limits they are compared to (additive).
  "fleet_endpoint_wait_seconds",
  "fleet_model_requests_total",
  "fleet_endpoint_limit",
  // Added since (README, Metrics and dashboard): each has a panel too.
  "fleet_redis_eviction_policy_safe",
  "fleet_redis_data_losses_total",
  "fleet_webhook_deliveries_total",
  "fleet_hook_failures_total",
  "fleet_sessions_deleted_total",
  "fleet_events_written_total",
  "fleet_sse_clients",
  "fleet_model_tokens_total",
  "fleet_worker_heartbeat_age_seconds",
  "fleet_worker_heartbeat_ttl_seconds",
  "fleet_retention_passes_total",
  "fleet_history_messages_read_total",
  "fleet_auth_failures_total",
  "fleet_requests_limited_total",
  "fleet_lease_wait_seconds",
  "fleet_lease_retakes_total",
  "fleet_db_rideouts_total",
  "fleet_event_places_gone_total",
  "fleet_sweeper_pass_age_seconds",
  "fleet_sweeper_interval_seconds",
  "fleet_run_progress_age_seconds",
  "fleet_runs_stuck",
  "fleet_run_stuck_after_seconds",
  "fleet_tool_timeouts_total",
  "fleet_tools_abandoned",
] as const;
const HISTOGRAMS = [
  "fleet_crash_to_resume_seconds",
  "fleet_endpoint_wait_seconds",
  "fleet_lease_wait_seconds",
];
const CONTRACT_SERIES = new Set<string>([
  ...CONTRACT_METRICS,
  ...HISTOGRAMS.flatMap((h) => [`${h}_bucket`, `${h}_sum`, `${h}_count`]),
]);

type EnvValue = string | number | boolean | null;
type ComposeService = {
  image?: string;
  build?: string | { context?: string };
  command?: unknown;
  environment?: Record<string, EnvValue> | string[];
  ports?: (string | number)[];
  volumes?: (string | { source?: string; target?: string })[];
  depends_on?: string[] | Record<string, { condition?: string }>;
  deploy?: { replicas?: number };
  healthcheck?: { test?: string | string[] };
  restart?: string;
  stop_grace_period?: string;
  init?: boolean;
};
type Compose = { services: Record<string, ComposeService>; volumes?: Record<string, unknown> };

function loadYaml<T>(path: string): T {
  // docker compose resolves `<<` merge keys; so must we.
  return parse(read(path), { merge: true }) as T;
}

const compose = loadYaml<Compose>("docker-compose.yml");

function service(name: string): ComposeService {
  const found = compose.services[name];
  if (!found) throw new Error(`docker-compose.yml has no service "${name}"`);
  return found;
}

/** A service's environment as a map; `null` means "passed through from the host". */
function environmentOf(s: ComposeService): Record<string, string | null> {
  const env = s.environment ?? {};
  const entries: [string, string | null][] = Array.isArray(env)
    ? env.map((item) => {
        const eq = item.indexOf("=");
        return eq < 0 ? [item, null] : [item.slice(0, eq), item.slice(eq + 1)];
      })
    : Object.entries(env).map(([k, v]) => [k, v === null ? null : String(v)]);
  return Object.fromEntries(entries);
}

/** `${NAME}`, `${NAME:-}`, `${NAME-default}`: taken from the host at `up` time. */
const INTERPOLATION = /^\$\{([A-Za-z_][A-Za-z0-9_]*)(?::?[-?][^}]*)?\}$/;

/** The configuration a service's process will load (host pass-throughs left unset). */
function configOf(name: string): FleetConfig {
  const env: Record<string, string> = {};
  for (const [k, v] of Object.entries(environmentOf(service(name)))) {
    if (v !== null && !INTERPOLATION.test(v)) env[k] = v;
  }
  return loadConfig(env);
}

function dependsOn(s: ComposeService): Record<string, string | undefined> {
  const deps = s.depends_on ?? {};
  if (Array.isArray(deps)) return Object.fromEntries(deps.map((d) => [d, undefined]));
  return Object.fromEntries(Object.entries(deps).map(([k, v]) => [k, v?.condition]));
}

function bindMounts(s: ComposeService): { source: string; target: string }[] {
  return (s.volumes ?? []).flatMap((v) => {
    const [source, target] = typeof v === "string" ? v.split(":") : [v.source, v.target];
    return source?.startsWith(".") && target ? [{ source, target }] : [];
  });
}

/** The variable names of the zod object in src/shared/config-schema.ts (what config.ts parses). */
function configEnvNames(): string[] {
  const text = read("src/shared/config-schema.ts");
  const start = text.indexOf("z.object({");
  expect(start, "config-schema.ts declares its environment with z.object({ ... })").toBeGreaterThan(0);
  const block = text.slice(start, text.indexOf("\n});", start));
  return [...block.matchAll(/^\s*([A-Z][A-Z0-9_]*)\s*:/gm)].map((m) => m[1]!);
}

/** The `fleet` subcommands, from the usage the real CLI prints. */
function fleetCommands(): Set<string> {
  const out = execFileSync(process.execPath, [join(ROOT, "bin/fleet.js"), "--help"], {
    cwd: ROOT,
    encoding: "utf8",
    timeout: 20_000,
  });
  expect(out).toMatch(/^usage:/m);
  return new Set([...out.matchAll(/^\s*fleet ([a-z][a-z0-9-]*)/gm)].map((m) => m[1]!));
}

describe("docker-compose.yml", () => {
  it("runs every fleet role from the image built here, with a real `fleet` subcommand", () => {
    const commands = fleetCommands();
    expect([...commands]).toEqual(expect.arrayContaining(["migrate", "api", "worker", "sweeper"]));
    for (const name of OUR_SERVICES) {
      const s = service(name);
      const context = typeof s.build === "string" ? s.build : s.build?.context;
      expect(context, `${name} builds from .`).toBe(".");
      expect(Array.isArray(s.command), `${name}: command is an exec-form array`).toBe(true);
      const [subcommand] = s.command as string[];
      expect(commands, `${name}: "fleet ${subcommand}" is a fleet command`).toContain(subcommand);
      expect(subcommand).toBe(name);
    }
  });

  it("migrates once, before the long-lived roles start", () => {
    const migrate = service("migrate");
    expect(migrate.restart).toBe("no");
    expect(dependsOn(migrate)).toEqual({ postgres: "service_healthy", redis: "service_healthy" });
    for (const name of ["api", "worker", "sweeper"]) {
      expect(dependsOn(service(name)).migrate, name).toBe("service_completed_successfully");
    }
    expect(service("worker").deploy?.replicas).toBe(2);
    expect(JSON.stringify(service("postgres").healthcheck?.test)).toContain("pg_isready");
    expect(JSON.stringify(service("redis").healthcheck?.test)).toMatch(/redis-cli.*ping/);
  });

  it("sets only environment variables that src/shared/config.ts knows, with valid values", () => {
    const known = configEnvNames();
    // contracts.md §3, and the metrics port of §6.
    expect(known).toEqual(
      expect.arrayContaining([
        "DATABASE_URL",
        "REDIS_URL",
        "FLEET_PREFIX",
        "PORT",
        "FLEET_TOOL_DIR",
        "METRICS_PORT",
      ]),
    );
    for (const name of OUR_SERVICES) {
      const env = environmentOf(service(name));
      expect(Object.keys(env).length, `${name} has an environment`).toBeGreaterThan(0);
      for (const key of Object.keys(env)) expect(known, `${name}: ${key}`).toContain(key);
      const config = configOf(name);
      expect(config.prefix).toBe("fleet");
      expect(config.logLevel).toBe("info");
      expect(config.toolDir).toBe("/data/files");
    }
  });

  it("runs each role under the image's init (tini), and adds no second one: node is not PID 1", () => {
    // As PID 1, node gets no default action for a signal it has no handler for (a SIGTERM
    // before the role's handler is installed, or a SIGINT, does nothing) and the zombies of
    // any child it leaves (a tool's subprocess) are never reaped; tini, the image's
    // ENTRYPOINT (describe "Dockerfile"), forwards the signals and reaps them. Docker's
    // `init: true` would put its own init in front, leaving tini not PID 1 (it warns so).
    expect(read("Dockerfile")).toMatch(/^ENTRYPOINT \["\/usr\/bin\/tini", "--", /m);
    for (const name of OUR_SERVICES) expect(service(name).init, name).toBeUndefined();
  });

  it("lets each role end its own stop before Docker kills it (stop_grace_period past its exit deadline)", () => {
    // Compose's duration: `30s`, `1m30s`; Docker's default is 10 s.
    const seconds = (period: string | undefined) => {
      if (period === undefined) return 10;
      const match = /^(?:(\d+)m)?(?:(\d+)s)?$/.exec(period);
      if (!match || period === "") throw new Error(`stop_grace_period ${period}: not read here`);
      return Number(match[1] ?? 0) * 60 + Number(match[2] ?? 0);
    };
    for (const role of ["api", "worker", "sweeper"] as const) {
      const deadlineMs = exitDeadlineMs(role, configOf(role).shutdownGraceMs);
      expect(seconds(service(role).stop_grace_period) * 1000, role).toBeGreaterThan(deadlineMs);
    }
  });

  it("gives model API keys to the workers only, from the host environment", () => {
    for (const [name, s] of Object.entries(compose.services)) {
      const env = environmentOf(s);
      const keys = Object.keys(env).filter((k) => /API_KEY/.test(k));
      if (name === "worker") expect(keys.sort()).toEqual(["ANTHROPIC_API_KEY", "OPENAI_API_KEY"]);
      else expect(keys, `${name} gets no API key`).toEqual([]);
      for (const key of keys) {
        const value = env[key] ?? null;
        // Either `KEY:` (pass-through) or `${KEY...}`, never a literal.
        if (value !== null) expect(value.match(INTERPOLATION)?.[1], key).toBe(key);
      }
    }
  });

  it("points the fleet at the compose Postgres and Redis with matching credentials", () => {
    const config = configOf("migrate");
    for (const name of OUR_SERVICES) expect(configOf(name).databaseUrl).toBe(config.databaseUrl);
    const db = new URL(config.databaseUrl);
    expect(db.hostname).toBe("postgres");
    expect(db.port).toBe("5432");
    expect(db.pathname).toBe("/agent_fleet");
    const pgEnv = environmentOf(service("postgres"));
    // `fleet migrate` logs into the `postgres` database with these to create agent_fleet.
    expect(decodeURIComponent(db.username)).toBe(pgEnv.POSTGRES_USER ?? "postgres");
    expect(decodeURIComponent(db.password)).toBe(pgEnv.POSTGRES_PASSWORD);
    expect(new URL(config.redisUrl).hostname).toBe("redis");
  });

  it("serves the API and the metrics on the ports the processes listen on", () => {
    const api = configOf("api");
    expect(service("api").ports?.map(String)).toContain(`${api.port}:${api.port}`);
    for (const name of SCRAPED_SERVICES) {
      const config = configOf(name);
      const port = name === "api" ? config.port : config.metricsPort;
      expect(port, `${name}: a fixed port (0 would pick a random one)`).toBeGreaterThan(0);
      expect(JSON.stringify(service(name).healthcheck?.test), `${name} healthcheck`).toContain(
        `127.0.0.1:${port}/healthz`,
      );
    }
  });

  it("gives the workers a shared named volume at FLEET_TOOL_DIR", () => {
    const toolDir = configOf("worker").toolDir;
    const mount = (service("worker").volumes ?? [])
      .map((v) => (typeof v === "string" ? v.split(":") : [v.source, v.target]))
      .find(([, target]) => target === toolDir);
    expect(mount, `a volume on ${toolDir}`).toBeDefined();
    expect(compose.volumes ?? {}).toHaveProperty(mount![0]!);
  });

  it("mounts only files that exist", () => {
    for (const [name, s] of Object.entries(compose.services)) {
      for (const { source } of bindMounts(s))
        expect(existsSync(join(ROOT, source)), `${name}: ${source}`).toBe(true);
    }
  });

  const composeCli = (() => {
    const v2 = spawnSync("docker", ["compose", "version"], { encoding: "utf8" });
    if (v2.status === 0) return { cmd: "docker", args: ["compose"] };
    const v1 = spawnSync("docker-compose", ["version"], { encoding: "utf8" });
    if (v1.status === 0) return { cmd: "docker-compose", args: [] };
    return null;
  })();

  // Needs a compose CLI but no engine: the compose plugin, or Debian's docker-compose (.ci/run
  // installs it). Without one this fails rather than being skipped.
  it("is valid for `docker compose config` (no engine needed)", () => {
    expect(
      composeCli,
      "no `docker compose` or `docker-compose` (Debian: apt-get install docker-compose)",
    ).not.toBeNull();
    const { cmd, args } = composeCli!;
    const result = spawnSync(cmd, [...args, "-f", "docker-compose.yml", "config", "-q"], {
      cwd: ROOT,
      encoding: "utf8",
      timeout: 60_000,
    });
    expect(result.stderr).not.toMatch(/error/i);
    expect(result.status, result.stderr).toBe(0);
  });
});

describe("deploy/prometheus/prometheus.yml", () => {
  type ScrapeConfig = {
    job_name: string;
    metrics_path?: string;
    static_configs?: { targets: string[] }[];
    dns_sd_configs?: { names: string[]; type?: string; port?: number }[];
  };
  const prometheus = loadYaml<{ global: { scrape_interval: string }; scrape_configs: ScrapeConfig[] }>(
    "deploy/prometheus/prometheus.yml",
  );

  /** Every scrape target as [service, port]. */
  const targets: [string, number][] = prometheus.scrape_configs.flatMap((job) => {
    expect(job.metrics_path ?? "/metrics").toBe("/metrics");
    const fromStatic = (job.static_configs ?? []).flatMap((c) =>
      c.targets.map((t): [string, number] => {
        const [host, port] = t.split(":");
        return [host!, Number(port)];
      }),
    );
    const fromDns = (job.dns_sd_configs ?? []).flatMap((c) => {
      expect(c.type ?? "SRV", "A records carry no port; SRV needs swarm").toBe("A");
      return c.names.map((n): [string, number] => [n, Number(c.port)]);
    });
    return [...fromStatic, ...fromDns];
  });

  it("scrapes every 5 s", () => {
    expect(prometheus.global.scrape_interval).toBe("5s");
  });

  it("scrapes the API, every worker and the sweeper on their configured ports", () => {
    for (const name of SCRAPED_SERVICES) {
      const config = configOf(name);
      const port = name === "api" ? config.port : config.metricsPort;
      expect(targets, `${name}:${port}`).toContainEqual([name, port]);
    }
    // No stray target: each is one of ours, on its port.
    for (const [host, port] of targets) {
      expect(SCRAPED_SERVICES as readonly string[]).toContain(host);
      const config = configOf(host);
      expect(port, host).toBe(host === "api" ? config.port : config.metricsPort);
    }
    // Workers are scaled, so they are found by DNS rather than listed.
    const workerJob = prometheus.scrape_configs.find((j) =>
      j.dns_sd_configs?.some((c) => c.names.includes("worker")),
    );
    expect(workerJob).toBeDefined();
  });

  it("is the file the prometheus service mounts", () => {
    expect(bindMounts(service("prometheus"))).toContainEqual({
      source: "./deploy/prometheus/prometheus.yml",
      target: "/etc/prometheus/prometheus.yml",
    });
  });
});

describe("deploy/grafana provisioning", () => {
  const grafana = service("grafana");

  it("provisions the Prometheus datasource with uid prometheus", () => {
    const file = loadYaml<{ datasources: { uid: string; type: string; url: string }[] }>(
      "deploy/grafana/provisioning/datasources/prometheus.yml",
    );
    const [ds] = file.datasources;
    expect(ds?.uid).toBe("prometheus");
    expect(ds?.type).toBe("prometheus");
    const url = new URL(ds!.url);
    expect(compose.services).toHaveProperty(url.hostname);
    expect(service(url.hostname).ports?.map(String)).toContain(`${url.port}:${url.port}`);
  });

  it("loads the dashboards from the folder compose mounts", () => {
    const file = loadYaml<{ providers: { type: string; options: { path: string } }[] }>(
      "deploy/grafana/provisioning/dashboards/fleet.yml",
    );
    const [provider] = file.providers;
    expect(provider?.type).toBe("file");
    expect(provider?.options.path).toBe("/var/lib/grafana/dashboards");
    const mounts = bindMounts(grafana);
    expect(mounts).toContainEqual({ source: "./deploy/grafana/dashboards", target: provider!.options.path });
    expect(mounts).toContainEqual({
      source: "./deploy/grafana/provisioning",
      target: "/etc/grafana/provisioning",
    });
    expect(existsSync(join(ROOT, "deploy/grafana/dashboards/agent-fleet.json"))).toBe(true);
  });

  it("lets anonymous users view", () => {
    const env = environmentOf(grafana);
    expect(env.GF_AUTH_ANONYMOUS_ENABLED).toBe("true");
    expect(env.GF_AUTH_ANONYMOUS_ORG_ROLE).toBe("Viewer");
    expect(grafana.ports?.map(String)).toContain("3001:3000");
  });
});

describe("deploy/grafana/dashboards/agent-fleet.json", () => {
  type Target = { expr?: string; datasource?: { uid?: string } };
  type Panel = {
    id: number;
    type: string;
    title: string;
    gridPos: { x: number; y: number; w: number; h: number };
    datasource?: { uid?: string };
    targets?: Target[];
    panels?: Panel[];
    fieldConfig?: { defaults?: { custom?: { stacking?: { mode?: string } } }; overrides?: unknown[] };
  };
  const dashboard = JSON.parse(read("deploy/grafana/dashboards/agent-fleet.json")) as {
    uid: string;
    title: string;
    schemaVersion: number;
    panels: Panel[];
  };
  const all: Panel[] = dashboard.panels.flatMap((p) => [p, ...(p.panels ?? [])]);
  const inOrder = [...all].sort((a, b) => a.gridPos.y - b.gridPos.y || a.gridPos.x - b.gridPos.x);
  const exprs = (p: Panel) => (p.targets ?? []).map((t) => t.expr ?? "");
  const metricsOf = (p: Panel) => exprs(p).flatMap(metricNames);

  it("finds metric names in PromQL (and only those)", () => {
    expect(
      metricNames('sum by (le) (rate(a_bucket{x="y{z}"}[$__rate_interval])) / on(x) b or vector(0)'),
    ).toEqual(["a_bucket", "b"]);
    expect(metricNames("histogram_quantile(0.99, sum(rate(c[5m])) by (le)) > 1e3 offset 5m")).toEqual(["c"]);
  });

  it("is the agent-fleet dashboard", () => {
    expect(dashboard.uid).toBe("agent-fleet");
    expect(dashboard.title).toBe("agent-fleet");
    expect(dashboard.schemaVersion).toBe(39);
    const ids = all.map((p) => p.id);
    expect(new Set(ids).size).toBe(ids.length);
  });

  it("queries only contract metrics (contracts.md §6) that src/shared/metrics.ts defines", () => {
    // metrics.ts, with the run metrics in run-metrics.ts and its gauges in queue-depths-gauge.ts
    // and liveness-metrics.ts.
    const defined = new Set(
      ["metrics.ts", "run-metrics.ts", "queue-depths-gauge.ts", "liveness-metrics.ts"].flatMap((file) =>
        [...read(`src/shared/${file}`).matchAll(/name:\s*"([a-z_:]+)"/g)].map((m) => m[1]!),
      ),
    );
    const used = new Set(all.flatMap(metricsOf));
    expect(used.size).toBeGreaterThan(0);
    for (const name of used) {
      expect(CONTRACT_SERIES, `${name} is a contract metric`).toContain(name);
      const base = name.replace(/_(bucket|sum|count)$/, "");
      expect(defined, `${name} is defined in metrics.ts`).toContain(HISTOGRAMS.includes(base) ? base : name);
    }
    // Every contract metric has a panel, and so has every metric metrics.ts defines.
    for (const name of CONTRACT_METRICS) {
      expect(
        [...used].some((u) => u === name || u.startsWith(`${name}_`)),
        `a panel shows ${name}`,
      ).toBe(true);
    }
    for (const name of defined) expect(CONTRACT_METRICS, `${name} has a panel`).toContain(name);
  });

  it("queries the provisioned Prometheus datasource", () => {
    for (const p of all.filter((p) => p.type !== "row")) {
      expect(p.datasource?.uid, p.title).toBe("prometheus");
      for (const t of p.targets ?? []) expect(t.datasource?.uid ?? "prometheus", p.title).toBe("prometheus");
      expect(exprs(p).length, `${p.title} has a query`).toBeGreaterThan(0);
    }
  });

  it("opens with the resume kinds", () => {
    expect(inOrder[0]?.type).toBe("row");
    expect(inOrder[0]?.title).toMatch(/resume/i);
    const firstRow = inOrder.slice(
      1,
      inOrder.findIndex((p, i) => i > 0 && p.type === "row"),
    );
    expect(metricsOf(firstRow[0]!)).toEqual(["fleet_resumes_total"]);
    const resumes = firstRow.filter((p) => metricsOf(p).includes("fleet_resumes_total"));
    const grouped = resumes.map((p) => exprs(p).join(" "));
    expect(grouped.some((e) => /by \(kind\)/.test(e))).toBe(true);
    expect(grouped.some((e) => /by \(trigger\)/.test(e))).toBe(true);
    for (const p of resumes) expect(p.fieldConfig?.defaults?.custom?.stacking?.mode, p.title).toBe("normal");
    expect(firstRow.some((p) => metricsOf(p).includes("fleet_resume_refusals_total"))).toBe(true);
  });

  it("shows crash → resume p50 and p99, and highlights interrupted tool calls", () => {
    const latency = all.flatMap(exprs).filter((e) => e.includes("fleet_crash_to_resume_seconds_bucket"));
    expect(latency.some((e) => /histogram_quantile\(0\.5,/.test(e))).toBe(true);
    expect(latency.some((e) => /histogram_quantile\(0\.99,/.test(e))).toBe(true);
    const tools = all.find((p) => exprs(p).some((e) => /by \(tool, outcome\)/.test(e)));
    expect(JSON.stringify(tools?.fieldConfig?.overrides)).toContain("interrupted");
  });
});

describe("deploy/prometheus rule files", () => {
  const config = loadYaml<{ rule_files?: string[] }>("deploy/prometheus/prometheus.yml");

  it("are loaded by prometheus.yml from the folder compose mounts next to it", () => {
    const patterns = config.rule_files ?? [];
    expect(patterns.length).toBeGreaterThan(0);
    const mounts = bindMounts(service("prometheus"));
    for (const pattern of patterns) {
      // Relative to the config file: /etc/prometheus in the container, deploy/prometheus here.
      expect(pattern.startsWith("/"), pattern).toBe(false);
      const dir = pattern.slice(0, pattern.lastIndexOf("/"));
      expect(mounts, pattern).toContainEqual({
        source: `./deploy/prometheus/${dir}`,
        target: `/etc/prometheus/${dir}`,
      });
      const files = readdirSync(join(ROOT, "deploy/prometheus", dir)).filter((f) => f.endsWith(".yml"));
      expect(files.length, `${pattern} matches rule files`).toBeGreaterThan(0);
      for (const file of files) {
        const rules = loadYaml<{ groups?: { rules?: unknown[] }[] }>(`deploy/prometheus/${dir}/${file}`);
        expect(rules.groups?.length, `${file} is a rule file`).toBeGreaterThan(0);
      }
    }
  });
});

describe("deploy/grafana/dashboards/agent-fleet.json queries", () => {
  type Target = { expr?: string; instant?: boolean; range?: boolean };
  type Panel = {
    type: string;
    title: string;
    targets?: Target[];
    panels?: Panel[];
    options?: { legend?: { calcs?: string[] } };
  };
  const dashboard = JSON.parse(read("deploy/grafana/dashboards/agent-fleet.json")) as { panels: Panel[] };
  const all = dashboard.panels.flatMap((p) => [p, ...(p.panels ?? [])]);

  it("names each panel once (panels are found by title)", () => {
    const titles = all.map((p) => p.title);
    expect(new Set(titles).size).toBe(titles.length);
  });

  it("counts over the selected range: instant increase() over $__range", () => {
    // Stats of counters; a stat of a gauge (the Redis eviction policy) shows its value now.
    const counts = all.filter(
      (p) =>
        (p.type === "stat" || p.type === "bargauge") &&
        (p.targets ?? []).some((t) => t.expr?.includes("_total")),
    );
    expect(counts.length).toBeGreaterThanOrEqual(4);
    for (const p of counts) {
      for (const t of p.targets ?? []) {
        expect(t.instant, p.title).toBe(true);
        expect(t.range ?? false, p.title).toBe(false);
        expect(t.expr, p.title).toMatch(/\bincrease\([a-z_]+(\{[^}]*\})?\[\$__range\]\)/);
      }
    }
    const counted = counts.flatMap((p) => (p.targets ?? []).map((t) => t.expr ?? "")).join(" ");
    for (const metric of ["fleet_resumes_total", "fleet_runs_total", "fleet_sessions_parked_total"])
      expect(counted, metric).toContain(metric);
    expect(counted).toContain('outcome="interrupted"');
  });

  it("rates over $__rate_interval, with no legend 'sum' of per-second samples (not a count)", () => {
    for (const p of all.filter((p) => p.type === "timeseries")) {
      for (const t of p.targets ?? []) {
        expect(t.expr, p.title).not.toContain("$__range");
        for (const m of (t.expr ?? "").matchAll(/\b(rate|increase)\([^[]*\[([^\]]+)\]/g))
          expect(m[2], p.title).toBe("$__rate_interval");
      }
      expect(p.options?.legend?.calcs ?? [], p.title).not.toContain("sum");
    }
  });
});

describe("Dockerfile", () => {
  const instructions = read("Dockerfile")
    .replace(/\\\r?\n/g, " ")
    .split(/\r?\n/)
    .map((line) => line.trim())
    .filter((line) => line && !line.startsWith("#"))
    .map((line) => {
      const [op = ""] = line.split(/\s+/, 1);
      return { op: op.toUpperCase(), args: line.slice(op.length).trim() };
    });
  const all = (op: string) => instructions.filter((i) => i.op === op).map((i) => i.args);
  const ignored = read(".dockerignore")
    .split(/\r?\n/)
    .map((l) => l.trim())
    .filter((l) => l && !l.startsWith("#"));
  const globToRegExp = (glob: string) =>
    new RegExp(
      `^${glob
        .replace(/[.+^${}()|[\]\\]/g, "\\$&")
        .replace(/\*/g, "[^/]*")
        .replace(/\?/g, ".")}$`,
    );

  it("compiles in a build stage and runs bin/fleet.js as a non-root user, both on Node 20", () => {
    expect(all("FROM")).toEqual(["node:20-bookworm-slim AS build", "node:20-bookworm-slim"]);
    expect(all("ENTRYPOINT").map((e) => JSON.parse(e))).toEqual([
      ["/usr/bin/tini", "--", "node", "bin/fleet.js"],
    ]);
    expect(existsSync(join(ROOT, "bin/fleet.js"))).toBe(true);
    const users = all("USER");
    expect(users.length).toBeGreaterThan(0);
    expect(users.at(-1)).not.toMatch(/^(root|0)(:|$)/);
  });

  it("runs node under tini, installed from Debian in the image stage: node is not PID 1 anywhere", () => {
    // compose sets `init: true`, but `docker run` without --init and Kubernetes run the
    // ENTRYPOINT as PID 1: node there reaps no zombies and ignores a signal it has no handler
    // for yet. tini, PID 1, forwards the signals and reaps; CMD stays the arguments to fleet.
    const image = read("Dockerfile")
      .split(/^FROM /m)
      .at(-1)!;
    const install = image
      .replace(/\\\r?\n/g, " ")
      .split(/\r?\n/)
      .find((line) => /^RUN\b.*\bapt-get install\b/.test(line));
    expect(install, "the image stage installs a package with apt-get").toBeDefined();
    expect(install).toMatch(/\bapt-get update\b/);
    expect(install).toMatch(/\binstall\s+(-\S+\s+)*.*\btini\b/);
    expect(install).toMatch(/--no-install-recommends/);
    expect(install, "the apt lists are removed in the same layer").toMatch(/rm -rf \/var\/lib\/apt\/lists/);
    // Installed while the stage is still root, before USER switches to the runtime user.
    const installAt = image.indexOf(install!.slice(0, 20));
    expect(installAt).toBeLessThan(image.search(/^USER /m));
    const [entry] = all("ENTRYPOINT").map((e) => JSON.parse(e) as string[]);
    expect(entry?.slice(0, 2)).toEqual(["/usr/bin/tini", "--"]);
    expect(all("CMD").map((c) => JSON.parse(c))).toEqual([["--help"]]);
  });

  it("copies files that exist and are in the build context", () => {
    const copied: string[] = [];
    for (const args of all("COPY")) {
      const parts = args.split(/\s+/);
      if (parts.some((p) => p.startsWith("--from"))) continue;
      const paths = parts.filter((p) => !p.startsWith("--"));
      for (const source of paths.slice(0, -1)) {
        const clean = source.replace(/^\.\//, "").replace(/\/$/, "");
        const matches = clean.includes("*")
          ? readdirSync(ROOT).filter((f) => globToRegExp(clean).test(f))
          : [clean].filter((f) => existsSync(join(ROOT, f)));
        expect(matches.length, `COPY ${source} exists`).toBeGreaterThan(0);
        for (const m of matches) {
          expect(
            ignored.some((pattern) => globToRegExp(pattern.replace(/^\//, "")).test(m)),
            `${m} is not .dockerignored`,
          ).toBe(false);
          copied.push(m);
        }
      }
    }
    // The build stage needs the sources and the build's tsconfig; the image, the manifest
    // and lockfile for `npm ci`, the postinstall script, the CLI and the migrations.
    for (const needed of [
      "package.json",
      "package-lock.json",
      "scripts",
      "tsconfig.json",
      "tsconfig.build.json",
      "tsconfig.cjs.json",
      "src",
      "bin",
      "drizzle",
    ]) {
      expect(copied, needed).toContain(needed);
    }
    expect(statSync(join(ROOT, "drizzle")).isDirectory()).toBe(true);
    for (const heavy of ["node_modules", ".git", "fleet-files", "dist"]) expect(ignored).toContain(heavy);
  });

  it("runs the compiled code: the build stage's dist/, beside production dependencies only", () => {
    const stages = read("Dockerfile")
      .split(/^FROM /m)
      .slice(1);
    expect(stages).toHaveLength(2);
    const [build, image] = stages as [string, string];
    expect(build).toMatch(/^RUN npm ci\b/m);
    expect(build).toMatch(/^RUN npm run build\b/m);
    expect(image).toMatch(/^RUN npm ci\b.*--omit=dev/m);
    expect(image).toMatch(/^COPY --from=build \/app\/dist \.\/dist$/m);
    expect(image, "the image holds no TypeScript sources").not.toMatch(/^COPY (\S+ )*src\b/m);
    const pkg = JSON.parse(read("package.json")) as { scripts: Record<string, string> };
    // The server, the client for CommonJS (dist/cjs), then the console (Vite, into
    // dist/console): the build stage copies console/ and tsconfig.cjs.json for them.
    expect(pkg.scripts.build).toBe(
      "tsc -p tsconfig.build.json && npm run build:cjs && npm run build:console",
    );
    expect(pkg.scripts["build:cjs"]).toMatch(/^tsc -p tsconfig\.cjs\.json && /);
    expect(pkg.scripts["build:console"]).toBe("vite build --config console/vite.config.ts");
    expect(build).toMatch(/^COPY console \.\/console$/m);
    const built = JSON.parse(read("tsconfig.build.json")) as { compilerOptions: { outDir: string } };
    expect(built.compilerOptions.outDir).toBe("dist");
  });

  it("installs production dependencies only, and the sources import nothing else (tsx only lazily)", () => {
    const pkg = JSON.parse(read("package.json")) as {
      dependencies: Record<string, string>;
      devDependencies: Record<string, string>;
    };
    const files = (dir: string): string[] =>
      readdirSync(join(ROOT, dir), { withFileTypes: true }).flatMap((e) =>
        e.isDirectory() ? files(join(dir, e.name)) : /\.[cm]?[jt]s$/.test(e.name) ? [join(dir, e.name)] : [],
      );
    const imported = new Set<string>();
    // Static imports and re-exports, bare imports, dynamic import("…"); not the word
    // "import" inside a string.
    const IMPORTS = [
      /^\s*(?:import|export)\b[^;]*?\bfrom\s*["']([^"']+)["']/gms,
      /^\s*import\s*["']([^"']+)["']/gm,
      /\bimport\(\s*["']([^"']+)["']\s*\)/g,
    ];
    for (const file of [...files("src"), ...files("bin")]) {
      const text = read(file);
      for (const m of IMPORTS.flatMap((pattern) => [...text.matchAll(pattern)])) {
        const spec = m[1]!;
        if (spec.startsWith(".")) continue;
        if (spec.startsWith("node:")) continue;
        const parts = spec.split("/");
        imported.add(spec.startsWith("@") ? parts.slice(0, 2).join("/") : parts[0]!);
      }
    }
    // tsx runs the sources of a checkout with no build (bin/fleet.js) and loads a TypeScript
    // --tools file; both import it only when needed, and the compiled code runs without it.
    expect(imported).toContain("tsx");
    expect(Object.keys(pkg.devDependencies)).toContain("tsx");
    expect(Object.keys(pkg.dependencies)).not.toContain("tsx");
    for (const file of [...files("src"), ...files("bin")])
      expect(read(file), `${file} imports tsx statically`).not.toMatch(/^import[^(]*["']tsx/m);
    for (const name of imported) {
      if (name === "tsx") continue;
      expect(Object.keys(pkg.dependencies), `${name} is a runtime dependency`).toContain(name);
    }
  });
});
