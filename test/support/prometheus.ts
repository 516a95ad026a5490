/**
 * The real Prometheus for tests: the `promtool` and `prometheus` binaries (Debian package
 * `prometheus`; .ci/run installs it), a server in a temporary directory on a free port, and
 * its HTTP query API. A missing binary fails the test with what to install, never skips it.
 */
import { type ChildProcess, execFile, spawn, spawnSync } from "node:child_process";
import { readFileSync } from "node:fs";
import { mkdtemp, rm, writeFile } from "node:fs/promises";
import { createServer } from "node:net";
import { tmpdir } from "node:os";
import { join, resolve } from "node:path";
import { parse, stringify } from "yaml";

export const PROMETHEUS_DIR = resolve(import.meta.dirname, "../../deploy/prometheus");

/** The path of a Prometheus binary, or an error that says how to get it. */
export function prometheusBinary(name: "prometheus" | "promtool"): string {
  const found = spawnSync("sh", ["-c", `command -v ${name}`], { encoding: "utf8" });
  const path = found.stdout.trim();
  if (found.status !== 0 || !path) {
    throw new Error(
      `${name} is not installed: these tests need the real Prometheus tools. Install the Debian ` +
        "package: `apt-get install -y prometheus` (.ci/run does this when they are missing).",
    );
  }
  return path;
}

/** Runs promtool; resolves with its exit code and output. */
export function promtool(args: string[], cwd = PROMETHEUS_DIR): { status: number; output: string } {
  const result = spawnSync(prometheusBinary("promtool"), args, { cwd, encoding: "utf8", timeout: 170_000 });
  return { status: result.status ?? -1, output: `${result.stdout}${result.stderr}` };
}

/** `promtool`, without blocking: several runs at once (each `test rules` is seconds of CPU). */
export function promtoolAsync(
  args: string[],
  cwd = PROMETHEUS_DIR,
): Promise<{ status: number; output: string }> {
  return new Promise((resolveRun) => {
    execFile(
      prometheusBinary("promtool"),
      args,
      { cwd, encoding: "utf8", timeout: 170_000, maxBuffer: 16 * 1024 * 1024 },
      (error, stdout, stderr) => {
        const status = error ? (typeof error.code === "number" ? error.code : -1) : 0;
        resolveRun({ status, output: `${stdout}${stderr}` });
      },
    );
  });
}

/** A TCP port that was free a moment ago. */
export async function freePort(): Promise<number> {
  return new Promise((resolvePort, reject) => {
    const server = createServer();
    server.once("error", reject);
    server.listen(0, "127.0.0.1", () => {
      const address = server.address();
      const port = typeof address === "object" && address ? address.port : 0;
      server.close(() => resolvePort(port));
    });
  });
}

export type PromSample = {
  metric: Record<string, string>;
  value?: [number, string];
  values?: [number, string][];
};
export type PromResult = { resultType: string; result: PromSample[] };

export type RunningPrometheus = {
  url: string;
  /** Everything the server printed, for failure messages. */
  output: () => string;
  /** An instant query; throws with Prometheus' error when the query fails. */
  query(expr: string, time?: number): Promise<PromResult>;
  /** A range query over [start, end] (Unix seconds). */
  queryRange(expr: string, start: number, end: number, stepSeconds: number): Promise<PromResult>;
  /** GET of another API path (e.g. /api/v1/rules), its `data`. */
  api<T>(path: string): Promise<T>;
  stop(): Promise<void>;
};

/**
 * deploy/prometheus/prometheus.yml as a test runs it: the same jobs and rule files, each
 * job scraping the given local targets, everything every `intervalSeconds`.
 */
export function testConfig(targets: Record<string, string[]>, intervalSeconds: number): string {
  const shipped = parse(readFileSync(join(PROMETHEUS_DIR, "prometheus.yml"), "utf8")) as {
    scrape_configs: { job_name: string; metrics_path?: string }[];
    rule_files?: string[];
  };
  const jobs = shipped.scrape_configs.map((c) => c.job_name).sort();
  if (JSON.stringify(jobs) !== JSON.stringify(Object.keys(targets).sort())) {
    throw new Error(
      `prometheus.yml scrapes ${jobs.join(", ")}; the test gives ${Object.keys(targets).join(", ")}`,
    );
  }
  return stringify({
    global: { scrape_interval: `${intervalSeconds}s`, evaluation_interval: `${intervalSeconds}s` },
    rule_files: (shipped.rule_files ?? []).map((f) => resolve(PROMETHEUS_DIR, f)),
    scrape_configs: shipped.scrape_configs.map((c) => ({
      job_name: c.job_name,
      metrics_path: c.metrics_path ?? "/metrics",
      static_configs: [{ targets: targets[c.job_name] }],
    })),
  });
}

/** Starts `prometheus` with this configuration; resolves once it answers queries. */
export async function startPrometheus(config: string): Promise<RunningPrometheus> {
  const binary = prometheusBinary("prometheus");
  const dir = await mkdtemp(join(tmpdir(), "fleet-prometheus-"));
  await writeFile(join(dir, "prometheus.yml"), config);
  const port = await freePort();
  const child: ChildProcess = spawn(
    binary,
    [
      `--config.file=${join(dir, "prometheus.yml")}`,
      `--storage.tsdb.path=${join(dir, "data")}`,
      `--web.listen-address=127.0.0.1:${port}`,
      "--log.level=warn",
    ],
    { stdio: ["ignore", "pipe", "pipe"] },
  );
  let out = "";
  child.stdout?.on("data", (d) => {
    out += d;
  });
  child.stderr?.on("data", (d) => {
    out += d;
  });
  const exited = new Promise<void>((done) => child.once("exit", () => done()));
  const url = `http://127.0.0.1:${port}`;

  const get = async <T>(path: string, params: Record<string, string> = {}): Promise<T> => {
    const response = await fetch(`${url}${path}?${new URLSearchParams(params)}`);
    const body = (await response.json()) as { status: string; data: T; error?: string; errorType?: string };
    if (body.status !== "success")
      throw new Error(`${path} ${JSON.stringify(params)}: ${body.errorType}: ${body.error}`);
    return body.data;
  };
  const stop = async () => {
    if (child.exitCode === null && child.signalCode === null) child.kill("SIGTERM");
    await Promise.race([exited, new Promise((r) => setTimeout(r, 5_000))]);
    if (child.exitCode === null && child.signalCode === null) {
      child.kill("SIGKILL");
      await exited;
    }
    await rm(dir, { recursive: true, force: true });
  };

  const deadline = Date.now() + 20_000;
  for (;;) {
    if (child.exitCode !== null) {
      await stop();
      throw new Error(`prometheus exited at start:\n${out}`);
    }
    const ready = await fetch(`${url}/-/ready`).then(
      (r) => r.ok,
      () => false,
    );
    if (ready) break;
    if (Date.now() > deadline) {
      await stop();
      throw new Error(`prometheus not ready after 20 s:\n${out}`);
    }
    await new Promise((r) => setTimeout(r, 100));
  }

  return {
    url,
    output: () => out,
    query: (expr, time) =>
      get<PromResult>("/api/v1/query", {
        query: expr,
        ...(time === undefined ? {} : { time: String(time) }),
      }),
    queryRange: (expr, start, end, step) =>
      get<PromResult>("/api/v1/query_range", {
        query: expr,
        start: String(start),
        end: String(end),
        step: String(step),
      }),
    api: (path) => get(path),
    stop,
  };
}
