/**
 * A loss of Redis's data, as an operator sees it: the real `prometheus` scraping two real
 * `fleet sweeper` processes every second, with the shipped rule files, over a redis-server of
 * this test's own (the FLUSHALL empties only it; never the shared one). Both sweepers see the
 * FLUSHALL (their marker key gone: redis-data-loss.ts) and each counts it once: Prometheus sees
 * fleet_redis_data_losses_total go 0 → 1 on both (it saw the 0 first, so increase() and rate()
 * count the jump), the dashboard panel's max over sweepers reads one loss where a sum would
 * read two, and FleetRedisDataLost fires with 1. Before, a loss was only a line in each log.
 *
 * Needs the `prometheus` binary (Debian package `prometheus`): without it this test fails.
 */
import type { ChildProcess } from "node:child_process";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { dashboardPanels, grafanaExpr } from "./support/dashboard.js";
import { createFleetEnv, type FleetEnv, type WorkerProcess, waitFor } from "./support/fleet-env.js";
import { freePort, startRedis, stopRedis } from "./support/private-redis.js";
import {
  prometheusBinary,
  type RunningPrometheus,
  startPrometheus,
  testConfig,
} from "./support/prometheus.js";
import { instance, scrapedAll } from "./support/prometheus-fleet.js";

const INTERVAL_S = 1;

type Alert = { labels: Record<string, string>; state: string; value: string };

/** The metrics port a `fleet sweeper` child printed in its ready line. */
function metricsPortOf(sweeper: WorkerProcess): number {
  const match = /fleet sweeper ready: metrics on port (\d+)/.exec(sweeper.output());
  if (!match) throw new Error(`no metrics port in the sweeper's output:\n${sweeper.output()}`);
  return Number(match[1]);
}

/** The dashboard panel's query as Grafana sends it, at a 1-minute rate interval. */
function panelQuery(title: string): string {
  const expr = dashboardPanels().find((p) => p.title === title)?.targets?.[0]?.expr;
  if (!expr) throw new Error(`no panel "${title}" with a query`);
  return grafanaExpr(expr, INTERVAL_S, "1m", 60);
}

describe("a FLUSHALL seen by two sweeper processes, through the real Prometheus", () => {
  let server: ChildProcess;
  let redisPort: number;
  let fleet: FleetEnv;
  let sweepers: { child: WorkerProcess; port: number; readyAt: number }[] = [];
  let prometheus: RunningPrometheus;
  let missing: Error | undefined;

  beforeAll(async () => {
    try {
      prometheusBinary("prometheus");
    } catch (error) {
      missing = error as Error; // the test fails with it: a missing binary is no reason to skip
      return;
    }
    redisPort = await freePort();
    server = await startRedis(redisPort);
    fleet = await createFleetEnv("promredisloss", {
      redisUrl: `redis://127.0.0.1:${redisPort}`,
      env: { SWEEP_INTERVAL_MS: "200" },
    });
    sweepers = await Promise.all(
      [0, 1].map(async () => {
        const child = await fleet.spawnSweeper();
        return { child, port: metricsPortOf(child), readyAt: Date.now() };
      }),
    );
    // Nobody answers on the API's and the worker's targets: only the sweepers matter here.
    prometheus = await startPrometheus(
      testConfig(
        {
          "fleet-api": [instance(await freePort())],
          "fleet-worker": [instance(await freePort())],
          "fleet-sweeper": sweepers.map((s) => instance(s.port)),
        },
        INTERVAL_S,
      ),
    );
  }, 180_000);

  afterAll(async () => {
    await prometheus?.stop();
    await fleet?.close();
    if (server) await stopRedis(server);
  }, 60_000);

  const losses = async (expr: string) =>
    (await prometheus.query(expr)).result.map((s) => [s.metric.instance, Number(s.value?.[1])]);
  const lostAlerts = async () =>
    (await prometheus.api<{ alerts: Alert[] }>("/api/v1/alerts")).alerts.filter(
      (a) => a.labels.alertname === "FleetRedisDataLost",
    );

  it("counts the loss once per sweeper; Prometheus sees the jump, the panel and the alert one loss", async () => {
    if (missing) throw missing;
    const ports = sweepers.map((s) => s.port);
    await scrapedAll(prometheus, ports, "the sweepers");
    // Each sweeper has taken its first look at the marker: a liveness pass (whose look at the
    // abandoned runs reads it) ended after it was ready; before its first, the pass's age runs
    // from the process's start.
    for (const sweeper of sweepers)
      await waitFor(
        async () => {
          const text = await (await fetch(`http://127.0.0.1:${sweeper.port}/metrics`)).text();
          const age = /fleet_sweeper_pass_age_seconds\{[^}]*pass="liveness"[^}]*\} (\S+)/.exec(text)?.[1];
          return age !== undefined && Number(age) * 1000 < Date.now() - sweeper.readyAt;
        },
        30_000,
        `a liveness pass of the sweeper on ${sweeper.port}`,
      );
    expect(await fleet.redis.get(`${fleet.config.prefix}:data-marker`)).not.toBeNull();
    // Prometheus has the counters at 0 before the loss: the jump is one increase() counts.
    const series = `fleet_redis_data_losses_total{job="fleet-sweeper"}`;
    const sorted = (rows: (string | number | undefined)[][]) =>
      rows.sort((a, b) => String(a[0]).localeCompare(String(b[0])));
    const targets = ports.map(instance).sort();
    // increase() extrapolates a seconds-old series' count by up to half a scrape interval: with
    // 10 samples or more, by under 6 %, so one loss reads 1 (two samples could read 1.5).
    const scrapes = async (n: number) =>
      (await losses(`count_over_time(${series}[5m]) >= ${n}`)).length === 2;
    await waitFor(
      async () => (await losses(`${series} == 0`)).length === 2 && (await scrapes(5)),
      30_000,
      "both counters scraped at 0",
    );
    expect(await lostAlerts()).toEqual([]);

    // This test's own Redis, never the shared one.
    expect(fleet.config.redisUrl).toBe(`redis://127.0.0.1:${redisPort}`);
    expect(await fleet.redis.flushall()).toBe("OK");

    await waitFor(
      async () => (await losses(`${series} == 1`)).length === 2,
      30_000,
      "both sweepers' counts at 1 in Prometheus",
    );
    await waitFor(() => scrapes(10), 30_000, "10 scrapes of each counter");
    expect(sorted(await losses(series))).toEqual(targets.map((t) => [t, 1]));
    // Seen as a jump: increase() over a minute is about 1 on each, rate() above 0.
    for (const [, value] of await losses(`increase(${series}[1m])`))
      expect(Math.round(value as number)).toBe(1);
    for (const [, value] of await losses(`rate(${series}[1m])`)) expect(value).toBeGreaterThan(0);
    // The panel reads one loss (the max over sweepers); a sum would read two.
    const panel = await losses(panelQuery("Redis data losses (seen by sweepers)"));
    expect(panel).toHaveLength(1);
    expect(Math.round(panel[0]![1] as number)).toBe(1);
    const summed = await losses(`sum(increase(${series}[1m]))`);
    expect(Math.round(summed[0]![1] as number)).toBe(2);

    let seen: Alert[] = [];
    await waitFor(
      async () => {
        seen = await lostAlerts();
        // Its value is its last evaluation's: wait for one over 10 samples.
        return seen.some((a) => a.state === "firing" && Math.round(Number(a.value)) === 1);
      },
      30_000,
      "FleetRedisDataLost firing with one loss",
    ).catch((error) => {
      throw new Error(`${(error as Error).message}: ${JSON.stringify(seen)}`);
    });
    expect(seen.map((a) => [a.labels.severity, a.state, Math.round(Number(a.value))])).toEqual([
      ["warning", "firing", 1],
    ]);
    // Each sweeper said so once in its log, too.
    for (const sweeper of sweepers)
      expect(sweeper.child.output().match(/Redis lost its data/g)).toHaveLength(1);
  }, 180_000);
});
