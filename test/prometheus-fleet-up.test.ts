/**
 * deploy/prometheus/fleet-up.yml, the scrape configuration for a fleet that `fleet up --workers
 * 2 --metrics-port-base 9100` runs on one machine without Docker: valid for the real promtool,
 * with the rule files prometheus.yml loads, the jobs prometheus.yml has (the alerts and the
 * dashboard read them), and as targets exactly the ports that command and the default PORT
 * give each role. Needs `promtool` (Debian package `prometheus`).
 */
import { mkdirSync, mkdtempSync, readFileSync, rmSync, symlinkSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { describe, expect, it } from "vitest";
import { parse } from "yaml";
import { upChildren } from "../src/commands/up.js";
import { loadConfig } from "../src/shared/config.js";
import { ROOT } from "./support/fleet-env.js";
import { PROMETHEUS_DIR, promtool } from "./support/prometheus.js";

type ScrapeConfig = { job_name: string; static_configs?: { targets: string[] }[] };
type Config = { rule_files?: string[]; scrape_configs: ScrapeConfig[] };
const read = (file: string) => parse(readFileSync(join(PROMETHEUS_DIR, file), "utf8")) as Config;
const ROLE_JOBS = { api: "fleet-api", worker: "fleet-worker", sweeper: "fleet-sweeper" } as const;

describe("deploy/prometheus/fleet-up.yml", () => {
  const local = read("fleet-up.yml");

  it("passes promtool check config, with the rule files prometheus.yml loads", () => {
    const { status, output } = promtool(["check", "config", "fleet-up.yml"]);
    expect(status, output).toBe(0);
    expect(local.rule_files).toEqual(read("prometheus.yml").rule_files);
    expect(output).toContain("rules/alerts.yml");
  });

  it("scrapes prometheus.yml's jobs at the ports of `fleet up --workers 2 --metrics-port-base 9100`", () => {
    const jobs = (config: Config) => config.scrape_configs.map((c) => c.job_name).sort();
    expect(jobs(local)).toEqual(jobs(read("prometheus.yml")));

    // What `fleet up` starts: each role's metrics port, the API on PORT (its default).
    const apiPort = loadConfig({}).port;
    const expected: Record<string, string[]> = {};
    for (const child of upChildren({ workers: 2 }, 9100)) {
      const flag = child.args.indexOf("--metrics-port");
      const port = child.role === "api" ? String(apiPort) : child.args[flag + 1];
      const job = ROLE_JOBS[child.role];
      expected[job] = [...(expected[job] ?? []), `127.0.0.1:${port}`];
    }
    const targets = Object.fromEntries(
      local.scrape_configs.map((c) => [c.job_name, (c.static_configs ?? []).flatMap((s) => s.targets)]),
    );
    console.log(JSON.stringify(targets));
    expect(targets).toEqual(expected);
  });

  it("is where the README's commands say, in a checkout and where the package is installed", () => {
    // The README showed `deploy/prometheus/fleet-up.yml` alone: in a project that installed the
    // package, promtool and prometheus answer "path … does not exist".
    const readme = readFileSync(join(ROOT, "README.md"), "utf8");
    const commands = [
      ...readme.matchAll(
        /^prometheus --config\.file=(\S+) .*# (in a checkout|where the package is installed)$/gm,
      ),
    ];
    expect(commands.map((m) => m[2])).toEqual(["in a checkout", "where the package is installed"]);
    const project = mkdtempSync(join(tmpdir(), "fleet-prometheus-project-"));
    try {
      mkdirSync(join(project, "node_modules"));
      symlinkSync(ROOT, join(project, "node_modules", "agent-fleet"), "dir");
      for (const [, file, where] of commands) {
        const { status, output } = promtool(
          ["check", "config", file!],
          where === "in a checkout" ? ROOT : project,
        );
        expect(status, `${where}: ${output}`).toBe(0);
      }
    } finally {
      rmSync(project, { recursive: true, force: true });
    }
  });
});
