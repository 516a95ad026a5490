/**
 * A live fleet scraped by the real Prometheus, as prometheus-live and prometheus-alerts-live
 * run it: the API and a sweeper serving /metrics in this process, Prometheus scraping them and
 * the workers' metrics ports with the shipped rule files; and how both tests read it back.
 */
import { expect } from "vitest";
import type { FleetClient } from "../../src/producer/client.js";
import { loadConfig } from "../../src/shared/config.js";
import { type RunningSweeper, startSweeper } from "../../src/sweeper/sweeper-process.js";
import { type FleetEnv, waitFor } from "./fleet-env.js";
import { type RunningPrometheus, startPrometheus, testConfig } from "./prometheus.js";

export type Counts = Record<string, number>;

/** A local target as Prometheus names it (its `instance` label). */
export const instance = (port: number) => `127.0.0.1:${port}`;

/** The API and a sweeper that serves /metrics, both in this process. */
export async function startApiAndSweeper(
  fleet: FleetEnv,
): Promise<{ client: FleetClient; apiPort: number; sweeper: RunningSweeper }> {
  const { client, api } = await fleet.startApi();
  const sweeper = await startSweeper(
    { ...loadConfig(fleet.env), logLevel: "silent" },
    { serveMetrics: true },
  );
  return { client, apiPort: api.port, sweeper };
}

/** Prometheus scraping the API, the workers and the sweeper on these ports, every `intervalSeconds`. */
export function scrapeFleet(
  ports: { api: number; workers: number[]; sweeper: number },
  intervalSeconds: number,
): Promise<RunningPrometheus> {
  return startPrometheus(
    testConfig(
      {
        "fleet-api": [instance(ports.api)],
        "fleet-worker": ports.workers.map(instance),
        "fleet-sweeper": [instance(ports.sweeper)],
      },
      intervalSeconds,
    ),
  );
}

/** Resolves once Prometheus has scraped each of these ports successfully; `what` names them when it does not. */
export async function scrapedAll(
  prometheus: RunningPrometheus,
  ports: number[],
  what: string,
): Promise<void> {
  await waitFor(
    async () => {
      const up = await prometheus.query('up{job=~"fleet-.*"} == 1');
      const live = new Set(up.result.map((s) => s.metric.instance));
      return ports.every((port) => live.has(instance(port)));
    },
    15_000,
    `Prometheus scraping ${what}\n${prometheus.output()}`,
  );
}

/**
 * A rate panel summed over time against the counts it should come back to: each key within
 * 30 % of its count, and within 0.6 however small the count.
 */
export function expectClose(got: Counts, want: Counts, what: string): void {
  for (const k of new Set([...Object.keys(got), ...Object.keys(want)]))
    expect(
      Math.abs((got[k] ?? 0) - (want[k] ?? 0)),
      `${what} ${k}: ${got[k]} vs ${want[k]}`,
    ).toBeLessThanOrEqual(Math.max(0.6, 0.3 * (want[k] ?? 0)));
}

/**
 * The longest time, in seconds, between two successful scrapes of one target while it was
 * up, over `window` ending at `time`: the scrape interval when every scrape arrived, more
 * when Prometheus missed some (a target's /metrics answering after the scrape timeout, e.g.
 * a busy test process's). A target's time after its last successful scrape (a killed worker)
 * is not a gap.
 */
export async function longestScrapeGap(
  prometheus: RunningPrometheus,
  window: string,
  time: number,
): Promise<{ seconds: number; instance: string }> {
  const up = await prometheus.query(`up{job=~"fleet-.*"}[${window}]`, time);
  let longest = { seconds: 0, instance: "" };
  for (const series of up.result) {
    const times = (series.values ?? []).filter(([, v]) => v === "1").map(([t]) => Number(t));
    for (let i = 1; i < times.length; i++) {
      const gap = times[i]! - times[i - 1]!;
      if (gap > longest.seconds) longest = { seconds: gap, instance: series.metric.instance ?? "" };
    }
  }
  return longest;
}

/**
 * Whether Prometheus missed a scrape of a live target since `startedAt` (said on stderr).
 * A rate panel's per-second rates, summed over time at Grafana's 4-scrape $__rate_interval,
 * come back to the counts only when every scrape arrived: a window holding one sample gives
 * no rate, so a counter's jump between missed scrapes is mostly lost to the sum (the count
 * itself is not: increase() spans the gap). The tests then check each rate panel's query
 * over the whole window instead: its rate times the window's length, the panel's increase.
 */
export async function missedScrapes(
  prometheus: RunningPrometheus,
  startedAt: number,
  intervalSeconds: number,
  what: string,
): Promise<boolean> {
  const now = Date.now() / 1000;
  const gap = await longestScrapeGap(prometheus, `${Math.ceil(now - startedAt) + 5}s`, now);
  const missed = gap.seconds > 1.5 * intervalSeconds;
  if (missed)
    console.warn(
      `${what}: ${gap.instance} went ${gap.seconds.toFixed(1)} s without a successful scrape; ` +
        "the rate panels are checked over the whole window, not summed at 4 scrape intervals",
    );
  return missed;
}
