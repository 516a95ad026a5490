/**
 * The alerts and panels added for what the last releases measure, proven on the real
 * `prometheus` scraping real fleet processes (the API and a sweeper in-process, a `fleet
 * worker` child) every second, with the shipped rule files:
 * - a Redis with `maxmemory-policy allkeys-lru`: FleetRedisEvictionUnsafe for every role;
 * - five sessions refused and parked at once: FleetSessionsParkedRising;
 * - a batch webhook whose receiver fails four times before it answers 200:
 *   FleetWebhookDeliveriesFailing, and the "Webhook deliveries" panel counts 4 failed, 1 delivered;
 * - an extension whose afterRun throws: FleetHookFailures{hook="afterRun"};
 * - a worker target nobody answers on: FleetTargetDown pending for it (its `for` is 5 min;
 *   rules.test.yml tests that it then fires);
 * - a session deleted through the API, and 21 idle for 2 days with FLEET_RETENTION_DAYS=1
 *   and FLEET_RETENTION_CHUNK=1: the "Sessions deleted" panel counts 1 api and 21 retention,
 *   "Retention passes" one pass that left more (20 per pass at most) and then caught up;
 * - Redis pausing writes (CLIENT PAUSE WRITE): the worker's heartbeat ages past its TTL and
 *   FleetWorkerNotLive goes pending for it (its `for` is 1 min: rules.test.yml);
 * - made-up API keys from one address past its burst (FLEET_API_AUTH_FAILURE_BURST=3): the
 *   "Refused API keys and 429s by limit" panel counts the 401s and the 429s, and
 *   FleetAuthFailuresLimited goes pending (its `for` is 10 min: rules.test.yml);
 * - a run inside a tool that never returns on the live worker, its last append an hour back:
 *   the sweeper exports it (fleet_run_progress_age_seconds, fleet_runs_stuck) and
 *   FleetRunStuck goes pending (its `for` is 1 min: rules.test.yml).
 * And every metric, label and label value the dashboard and the rules read exists in what
 * Prometheus scraped; no label carries an id.
 *
 * Needs the `prometheus` binary (Debian package `prometheus`): without it this test fails.
 */
import type { ChildProcess } from "node:child_process";
import { existsSync } from "node:fs";
import { createServer, type Server } from "node:http";
import { join } from "node:path";
import { Redis } from "ioredis";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import type { FleetClient } from "../src/producer/client.js";
import { MAX_CHUNKS_PER_PASS } from "../src/sweeper/retention.js";
import type { RunningSweeper } from "../src/sweeper/sweeper-process.js";
import { dashboardPanels, grafanaExpr, groupingLabels } from "./support/dashboard.js";
import { createFleetEnv, type FleetEnv, ROOT, waitFor } from "./support/fleet-env.js";
import { startRedis, stopRedis } from "./support/private-redis.js";
import { freePort, prometheusBinary, type RunningPrometheus } from "./support/prometheus.js";
import {
  instance as at,
  type Counts,
  expectClose,
  missedScrapes,
  scrapedAll,
  scrapeFleet,
  startApiAndSweeper,
} from "./support/prometheus-fleet.js";
import { alertRules, metricNames, recordingRules } from "./support/promql.js";

const INTERVAL_S = 1;
/** Webhook attempts the receiver fails before it answers 200. */
const RECEIVER_FAILS = 4;
const PARKED = 5;
/** Idle sessions retention deletes: one more than a pass may (20 chunks of 1). */
const RETAINED = MAX_CHUNKS_PER_PASS + 1;
/** Failed authentications one address may have at once, and the made-up keys sent past them. */
const AUTH_BURST = 3;
const AUTH_LIMITED = 4;
/** The sweepers still sweeping, as the rules and the "Runs without progress" panel read them. */
const SWEEPING =
  '(fleet_sweeper_pass_age_seconds{pass="liveness"} < on (job, instance, pass) ' +
  '(clamp_min(3 * fleet_sweeper_interval_seconds{pass="liveness"}, 60) or 0 * fleet_sweeper_pass_age_seconds{pass="liveness"} + 60))';

type Alert = { labels: Record<string, string>; state: string };

describe("new alerts and panels against a live fleet, through the real Prometheus", () => {
  let redis: ChildProcess;
  let fleet: FleetEnv;
  let client: FleetClient;
  let sweeper: RunningSweeper;
  let prometheus: RunningPrometheus;
  let receiver: Server;
  let missing: Error | undefined;
  let startedAt = 0;
  let redisPort = 0;
  const received: number[] = [];
  const ports = { api: 0, sweeper: 0, worker: 0, dead: 0, receiver: 0 };

  beforeAll(async () => {
    try {
      prometheusBinary("prometheus");
    } catch (error) {
      missing = error as Error; // the test fails with it: a missing binary is no reason to skip
      return;
    }
    redisPort = await freePort();
    redis = await startRedis(redisPort, ["--maxmemory-policy", "allkeys-lru"]);
    receiver = createServer((req, res) => {
      req.resume();
      req.on("end", () => {
        received.push(Date.now());
        res.writeHead(received.length <= RECEIVER_FAILS ? 500 : 200).end();
      });
    });
    await new Promise<void>((done) => receiver.listen(0, "127.0.0.1", done));
    const address = receiver.address();
    ports.receiver = typeof address === "object" && address ? address.port : 0;
    fleet = await createFleetEnv("promalerts", {
      redisUrl: `redis://127.0.0.1:${redisPort}`,
      env: {
        SWEEPER_BACKOFF_MS: "200",
        FLEET_WEBHOOK_SECRET: "promalerts-secret",
        FLEET_WEBHOOK_RETRY_MS: "100",
        FLEET_RETENTION_DAYS: "1",
        FLEET_RETENTION_CHUNK: "1",
        FLEET_RETENTION_INTERVAL_MS: "300",
        FLEET_API_AUTH_FAILURE_BURST: String(AUTH_BURST),
        FLEET_API_AUTH_FAILURES_PER_MINUTE: "0.1",
        // A declared endpoint, so that its series exist (nothing calls it).
        FLEET_MODEL_ENDPOINTS: JSON.stringify({
          main: { provider: "openai", baseUrl: "http://127.0.0.1:9/v1", limits: { requestsPerMinute: 600 } },
        }),
      },
    });
    ({ client, apiPort: ports.api, sweeper } = await startApiAndSweeper(fleet));
    ports.sweeper = sweeper.metricsPort!;
    ports.worker = await freePort();
    ports.dead = await freePort();
    await fleet.spawnWorker({}, [
      "--metrics-port",
      String(ports.worker),
      "--extensions",
      join(ROOT, "test/fixtures/recording-extension.ts"),
      "--tools",
      join(ROOT, "test/fixtures/hanging-tool.ts"),
    ]);
    prometheus = await scrapeFleet(
      { api: ports.api, workers: [ports.worker, ports.dead], sweeper: ports.sweeper },
      INTERVAL_S,
    );
    startedAt = Date.now() / 1000;
  });

  afterAll(async () => {
    await prometheus?.stop();
    await sweeper?.stop();
    await fleet?.close();
    await new Promise((done) => (receiver ? receiver.close(done) : done(undefined)));
    if (redis) await stopRedis(redis);
  });

  const alerts = async () => (await prometheus.api<{ alerts: Alert[] }>("/api/v1/alerts")).alerts;
  const name = (a: Alert) =>
    [a.labels.alertname, a.labels.reason ?? a.labels.hook ?? a.labels.instance ?? ""].join(":");

  it("fires the new alerts after their events, and the new panels count them", async () => {
    if (missing) throw missing;
    const live = [ports.api, ports.worker, ports.sweeper];
    await scrapedAll(prometheus, live, "every live role");

    // --- The events -----------------------------------------------------------------------
    const { sql } = fleet.database;
    const idle: string[] = [];
    for (let i = 0; i < RETAINED; i++)
      idle.push(
        (
          await client.createSession({
            agent: { model: { provider: "scripted", steps: [{ text: "unused" }] } },
          })
        ).id,
      );
    await sql`update sessions set updated_at = now() - interval '2 days' where id in ${sql(idle)}`;
    const refusal = {
      agent: { model: { provider: "scripted" as const, steps: [{ text: "no", stopReason: "refusal" }] } },
      input: "go",
    };
    const { sessions } = await client.createBatch(Array(PARKED).fill(refusal), {
      webhook: { url: `http://${at(ports.receiver)}/hook` },
    });
    const ids = sessions.map((s) => s.id);
    // A run inside a tool that never returns, on the live worker: an hour without an append.
    const hung = await client.createSession({
      agent: {
        model: {
          provider: "scripted",
          steps: [{ toolCalls: [{ id: "hang1", name: "hang", arguments: {} }] }],
        },
        tools: ["hang"],
      },
    });
    const { runId: hungRun } = await client.send(hung.id, "go");
    await waitFor(
      () => existsSync(join(fleet.env.FLEET_TOOL_DIR!, "hang-hang1")),
      20_000,
      "the tool hanging",
    );
    await sql`update sessions set last_active_at = last_active_at - interval '1 hour' where id = ${hung.id}`;
    await sql`update runs set started_at = started_at - interval '1 hour' where id = ${hungRun}`;
    const doomed = await client.createSession({
      agent: { model: { provider: "scripted", steps: [{ text: "done" }] } },
    });
    const { runId } = await client.send(doomed.id, "hi");
    await client.waitForRun(runId, { timeoutMs: 15_000 });
    await waitFor(
      async () => {
        const [row] = await sql<{ n: number }[]>`
          select count(*)::int as n from sessions where id in ${sql(ids)} and status = 'parked'`;
        return row!.n === PARKED;
      },
      20_000,
      "every refused session parked",
    );
    await waitFor(() => received.length > RECEIVER_FAILS, 20_000, "the webhook delivered after its failures");
    await waitFor(
      async () => (await sql`select id from sessions where id in ${sql(idle)}`).length === 0,
      10_000,
      "retention deleted the idle sessions",
    );
    const [runs] = await sql<{ n: number }[]>`
      select count(*)::int as n from runs where status = 'ended' and started_at is not null`;
    await client.deleteSession(doomed.id);
    const refused: number[] = [];
    for (let i = 0; i < AUTH_BURST + AUTH_LIMITED; i++)
      refused.push(
        (
          await fetch(`http://${at(ports.api)}/v1/sessions`, {
            headers: { authorization: `Bearer guess-${i}` },
          })
        ).status,
      );
    expect(refused).toEqual([...Array(AUTH_BURST).fill(401), ...Array(AUTH_LIMITED).fill(429)]);

    // --- The alerts -------------------------------------------------------------------------
    const roles = [ports.api, ports.worker, ports.sweeper].map((p) => `FleetRedisEvictionUnsafe:${at(p)}`);
    const firing = [
      ...roles,
      "FleetHookFailures:afterRun",
      "FleetSessionsParked:refused",
      "FleetSessionsParkedRising:",
      "FleetWebhookDeliveriesFailing:",
    ].sort();
    let seen: Alert[] = [];
    await waitFor(
      async () => {
        seen = await alerts();
        const now = seen.filter((a) => a.state === "firing").map(name);
        return (
          firing.every((a) => now.includes(a)) &&
          ["FleetAuthFailuresLimited:", "FleetRunStuck:"].every((n) => seen.some((a) => name(a) === n))
        );
      },
      20_000,
      "the new alerts firing",
    ).catch((error) => {
      throw new Error(`${(error as Error).message}: ${JSON.stringify(seen.map((a) => [name(a), a.state]))}`);
    });
    const states = (await alerts()).map((a) => `${name(a)} ${a.state}`).sort();
    expect(states).toEqual(
      [
        ...firing.map((a) => `${a} firing`),
        `FleetTargetDown:${at(ports.dead)} pending`,
        "FleetAuthFailuresLimited: pending",
        "FleetRunStuck: pending",
      ].sort(),
    );

    // --- The panels -------------------------------------------------------------------------
    // Quiet now: wait until every live role was scraped one rate window ($__rate_interval,
    // 4 scrapes) after the last event, so that the rate panels' sums over time hold it whole.
    const quietAt = Date.now() / 1000 + 4 * INTERVAL_S;
    await waitFor(
      async () => {
        const r = await prometheus.query(`min(timestamp(up{instance=~"${live.map(at).join("|")}"}))`);
        return Number(r.result[0]?.value?.[1] ?? 0) > quietAt + 0.2;
      },
      15_000,
      "a scrape after the last event",
    );
    // Scrapes Prometheus missed (this busy process's /metrics answering after the 1 s timeout)
    // change how the rate panels are checked (support/prometheus-fleet.ts).
    const missed = await missedScrapes(prometheus, startedAt, INTERVAL_S, "prometheus-alerts-live");
    const now = Date.now() / 1000;
    const windowSeconds = Math.ceil(now - startedAt) + 5;
    const window = `${windowSeconds}s`;
    const panels = new Map(dashboardPanels().map((p) => [p.title, p]));
    /**
     * A rate panel summed over time: its per-second rates come back to counts. With scrapes
     * missed, its query with the rate taken over the whole window, times the window.
     */
    const integral = async (title: string, label: string): Promise<Counts> => {
      const panel = panels.get(title);
      if (!panel) throw new Error(`the dashboard has no panel "${title}"`);
      const out: Counts = {};
      for (const target of panel.targets ?? []) {
        if (missed) {
          const whole = await prometheus.query(
            grafanaExpr(target.expr, INTERVAL_S, window, windowSeconds),
            now,
          );
          for (const s of whole.result) {
            const k = s.metric[label] ?? "";
            out[k] = (out[k] ?? 0) + Number(s.value?.[1]) * windowSeconds;
          }
          continue;
        }
        const expr = grafanaExpr(target.expr, INTERVAL_S, window);
        const result = await prometheus.queryRange(expr, Math.floor(startedAt), Math.ceil(now), INTERVAL_S);
        for (const s of result.result) {
          const k = s.metric[label] ?? "";
          out[k] = (out[k] ?? 0) + (s.values ?? []).reduce((sum, [, v]) => sum + Number(v) * INTERVAL_S, 0);
        }
      }
      return out;
    };
    expectClose(
      await integral("Webhook deliveries by outcome", "outcome"),
      { delivered: 1, failed: RECEIVER_FAILS, abandoned: 0 },
      "webhooks",
    );
    expectClose(
      await integral("Extension hook failures by hook", "hook"),
      { afterRun: runs!.n, beforeRun: 0, onMessage: 0, onCommitted: 0, onError: 0 },
      "hooks",
    );
    expectClose(
      await integral("Sessions deleted by trigger", "trigger"),
      { api: 1, retention: RETAINED },
      "deleted",
    );
    expectClose(
      await integral("Refused API keys and 429s by limit", "limit"),
      { "": AUTH_BURST, auth_failures: AUTH_LIMITED, request_rate: 0, active_sessions: 0, event_streams: 0 },
      "refused keys and 429s",
    );
    const passes = await integral("Retention passes by result", "result");
    expectClose({ more_left: passes.more_left! }, { more_left: 1 }, "retention passes");
    expect(passes.caught_up).toBeGreaterThan(1);
    // Events: what the processes counted themselves (read now, everything quiet).
    const ownCounts: Counts = {};
    for (const port of live) {
      const text = await (await fetch(`http://${at(port)}/metrics`)).text();
      for (const [, type, n] of text.matchAll(/^fleet_events_written_total\{type="(\w+)"[^}]*\} (\d+)$/gm))
        ownCounts[type!] = (ownCounts[type!] ?? 0) + Number(n);
    }
    expect(ownCounts.SESSION_PARKED).toBe(PARKED);
    expectClose(
      await integral("Events written by type", "type"),
      Object.fromEntries(Object.entries(ownCounts).filter(([, n]) => n > 0)),
      "events",
    );
    // The stuck run, as Prometheus scraped it from the sweeper (and the panel reads it).
    const stuck = async (expr: string) => Number((await prometheus.query(expr, now)).result[0]?.value?.[1]);
    expect(await stuck("max(fleet_runs_stuck)")).toBe(1);
    expect(await stuck("max(fleet_run_progress_age_seconds)")).toBeGreaterThan(3600);
    expect(await stuck("max(fleet_run_stuck_after_seconds)")).toBe(1800);
    // How often its passes run (SWEEP_INTERVAL_MS 200, the wide scan every 5th tick): what
    // FleetSweeperStuck and FleetRunStuck scale "late" by.
    const intervals = await prometheus.query("fleet_sweeper_interval_seconds", now);
    expect(Object.fromEntries(intervals.result.map((s) => [s.metric.pass, Number(s.value![1])]))).toEqual({
      liveness: 0.2,
      wide: 1,
    });
    // And as the rules read them: from the sweepers still sweeping (this one is).
    expect(await stuck("fleet:fleet_runs_stuck:max")).toBe(1);
    expect(await stuck("fleet:fleet_run_progress_age_seconds:max")).toBeGreaterThan(3600);
    expect((panels.get("Runs without progress (stuck)")?.targets ?? []).map((t) => t.expr).sort()).toEqual(
      [
        `max(fleet_run_progress_age_seconds and on (job, instance) ${SWEEPING})`,
        "max(fleet_run_stuck_after_seconds)",
        `max(fleet_runs_stuck and on (job, instance) ${SWEEPING})`,
      ].sort(),
    );
    const eviction = await prometheus.query(
      grafanaExpr(panels.get("Redis eviction policy")!.targets![0]!.expr, INTERVAL_S, window),
      now,
    );
    expect(Object.fromEntries(eviction.result.map((s) => [s.metric.instance, Number(s.value![1])]))).toEqual(
      Object.fromEntries(live.map((p) => [at(p), 0])),
    );
    const streams = await prometheus.query(grafanaExpr("sum(fleet_sse_clients)", INTERVAL_S, window), now);
    expect(streams.result.map((s) => Number(s.value![1]))).toEqual([0]);
    // The recording rule the webhook alerts read, exact once its window covers everything.
    const recorded = await prometheus.query("outcome:fleet_webhook_deliveries:increase15m", now);
    const byOutcome = Object.fromEntries(recorded.result.map((s) => [s.metric.outcome, Number(s.value![1])]));
    expect(Math.round(byOutcome.failed!)).toBeGreaterThanOrEqual(RECEIVER_FAILS);
    expect(Math.round(byOutcome.delivered!)).toBeGreaterThanOrEqual(1);

    // --- A worker up whose Redis takes no writes: its heartbeat ages past its TTL (2 s) ------
    const admin = new Redis(redisPort, "127.0.0.1");
    try {
      await admin.call("CLIENT", "PAUSE", "15000", "WRITE");
      await waitFor(
        async () =>
          (await alerts()).some(
            (a) => a.labels.alertname === "FleetWorkerNotLive" && a.labels.instance === at(ports.worker),
          ),
        12_000,
        "FleetWorkerNotLive for the worker whose heartbeat Redis does not take",
      );
      const age = await prometheus.query(
        `fleet_worker_heartbeat_age_seconds{instance="${at(ports.worker)}"}`,
      );
      expect(Number(age.result[0]!.value![1])).toBeGreaterThan(2);
    } finally {
      await admin.call("CLIENT", "UNPAUSE");
      admin.disconnect();
    }
  }, 60_000);

  it("has every metric, label and label value the dashboard and the rules read, and no id in a label", async () => {
    if (missing) throw missing;
    const recorded = new Set(recordingRules().map((r) => r.record));
    const exprs = [
      ...dashboardPanels().flatMap((p) => (p.targets ?? []).map((t) => ({ what: p.title, expr: t.expr }))),
      ...[...recordingRules(), ...alertRules()].map((r) => ({
        what: "record" in r ? r.record : r.alert,
        expr: r.expr,
      })),
    ];
    const has = async (selector: string) => (await prometheus.query(`count(${selector})`)).result.length > 0;
    const problems: string[] = [];
    for (const { what, expr } of exprs) {
      const plain = grafanaExpr(expr, INTERVAL_S, "1m");
      const metrics = metricNames(plain).filter((m) => !recorded.has(m) && m !== "up");
      for (const metric of metrics) if (!(await has(metric))) problems.push(`${what}: no series ${metric}`);
      // Every label it groups by is on some metric it reads.
      for (const label of groupingLabels(plain)) {
        const sources = metricNames(plain);
        let found = false;
        for (const m of sources) found ||= await has(`${m}{${label}!=""}`);
        if (!found) problems.push(`${what}: no metric of it has label ${label}`);
      }
      // Every label value it selects on a fleet metric exists (the series start at 0).
      for (const [, metric, matchers] of plain.matchAll(/\b(fleet_\w+)\{([^}]*)\}/g)) {
        for (const [, label, op, values] of matchers!.matchAll(/(\w+)\s*(=~|=)\s*"([^"]*)"/g)) {
          // A list of names: each exists. Another regex (le=~"1|1\\.0", one spelling per
          // Prometheus version): some value matches it.
          if (op === "=~" && !/^[\w|]+$/.test(values!)) {
            if (!(await has(`${metric}{${label}=~"${values}"}`)))
              problems.push(`${what}: no series ${metric}{${label}=~"${values}"}`);
            continue;
          }
          const list = op === "=~" ? values!.split("|") : [values!];
          for (const value of list)
            if (!(await has(`${metric}{${label}="${value}"}`)))
              problems.push(`${what}: no series ${metric}{${label}="${value}"}`);
        }
      }
    }
    expect(problems).toEqual([]);

    // Bounded label sets: no id in any label, and few series per metric and process.
    const all = await prometheus.query('{__name__=~"fleet_.+", __name__!~"fleet_process_.+"}');
    const perMetric: Counts = {};
    /** A UUID (session, run, batch ids) or a long hex id. */
    const id = /[0-9a-f]{8}-[0-9a-f]{4}-|^[0-9a-f]{16,}$/i;
    for (const s of all.result) {
      const k = `${s.metric.__name__} ${s.metric.instance}`;
      perMetric[k] = (perMetric[k] ?? 0) + 1;
      for (const [label, value] of Object.entries(s.metric))
        expect(id.test(value), `${s.metric.__name__} ${label}="${value}"`).toBe(false);
    }
    for (const [k, n] of Object.entries(perMetric)) expect(n, k).toBeLessThanOrEqual(100);
  }, 30_000);
});
