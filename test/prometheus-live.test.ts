/**
 * The dashboard and the rules tell the truth: a live fleet (the API and a sweeper
 * in-process, two `fleet worker` children) scraped every second by the real `prometheus`
 * with the shipped rule files. Sessions use tools, one worker is SIGKILLed inside a tool,
 * the sweeper resumes, others end refused, parked, cut off or failing at the provider, and
 * the API resumes one and refuses another. Then every PromQL query of the Grafana dashboard
 * and every recording rule is evaluated through Prometheus' HTTP API, and the counts are
 * compared with Postgres (and with what the API answered).
 *
 * Needs the `prometheus` binary (Debian package `prometheus`): without it this test fails.
 */
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { FleetApiError, type FleetClient } from "../src/producer/client.js";
import type { ScriptedStep } from "../src/shared/agent-config.js";
import { RESUME_TRIGGERS, TOOL_OUTCOMES, UNREGISTERED_TOOL } from "../src/shared/metrics.js";
import { PARK_REASONS } from "../src/shared/resume-policy.js";
import { RESUME_KINDS } from "../src/shared/resume-reasons.js";
import { stopReasonLabel } from "../src/shared/stop-reasons.js";
import type { RunningSweeper } from "../src/sweeper/sweeper-process.js";
import { dashboardPanels, grafanaExpr } from "./support/dashboard.js";
import { createFleetEnv, type FleetEnv, type WorkerProcess, waitFor } from "./support/fleet-env.js";
import {
  freePort,
  type PromResult,
  type PromSample,
  prometheusBinary,
  type RunningPrometheus,
} from "./support/prometheus.js";
import {
  type Counts,
  expectClose,
  instance,
  missedScrapes,
  scrapedAll,
  scrapeFleet,
  startApiAndSweeper,
} from "./support/prometheus-fleet.js";
import { recordingRules } from "./support/promql.js";
import { INTERRUPTED_TEXT, startSleepySessions } from "./support/sleepy-sessions.js";

/** Scrape and rule evaluation interval of the test's Prometheus. */
const INTERVAL_S = 1;
const BUILTIN_TOOLS = ["write_file", "append_file", "sleep", "fail"];
/** How long the victim is scraped before the kill: see `largest` in the test. */
const VICTIM_AGE_MS = 6_000;
/**
 * How long the fleet, once quiet, may take to be scraped and evaluated again. Two intervals
 * when nothing else runs; a CI machine running other test files beside this one once took
 * over 10 s (`issues ci`, stop 54), so the bound is generous and a miss says what it saw.
 */
const SETTLE_TIMEOUT_MS = 30_000;

const key = (...parts: (string | undefined)[]) => parts.map((p) => p ?? "").join("|");

/** A vector's values keyed by the given labels, rounded to whole events. */
function rounded(result: PromResult, labels: string[]): Counts {
  const out: Counts = {};
  for (const s of result.result) {
    const k = key(...labels.map((l) => s.metric[l]));
    out[k] = (out[k] ?? 0) + Math.round(Number(s.value?.[1]));
  }
  return out;
}

/** `counts` with every key of `keys` present (0 when absent), for a whole comparison. */
function withZeros(counts: Counts, keys: string[]): Counts {
  return Object.fromEntries(
    [...new Set([...keys, ...Object.keys(counts)])].sort().map((k) => [k, counts[k] ?? 0]),
  );
}

describe("dashboard and rules against a live fleet, through the real Prometheus", () => {
  let fleet: FleetEnv;
  let client: FleetClient;
  let sweeper: RunningSweeper;
  let prometheus: RunningPrometheus;
  let startedAt: number;
  let missing: Error | undefined;
  const ports = { api: 0, sweeper: 0, victim: 0, survivor: 0 };

  beforeAll(async () => {
    try {
      prometheusBinary("prometheus");
    } catch (error) {
      missing = error as Error; // the test fails with it: a missing binary is no reason to skip
      return;
    }
    fleet = await createFleetEnv("promlive", { env: { SWEEPER_BACKOFF_MS: "200" } });
    ({ client, apiPort: ports.api, sweeper } = await startApiAndSweeper(fleet));
    ports.sweeper = sweeper.metricsPort!;
    ports.victim = await freePort();
    ports.survivor = await freePort();
    prometheus = await scrapeFleet(
      { api: ports.api, workers: [ports.victim, ports.survivor], sweeper: ports.sweeper },
      INTERVAL_S,
    );
    startedAt = Date.now() / 1000;
  });

  afterAll(async () => {
    await prometheus?.stop();
    await sweeper?.stop();
    await fleet?.close();
  });

  /** Resolves once Prometheus has scraped each of these targets successfully. */
  const scraped = (...targets: number[]) => scrapedAll(prometheus, targets, targets.join(", "));

  /**
   * Resolves once each of the live targets (the API, the sweeper, the survivor) was last
   * scraped successfully after `time` (Unix s), and the rules evaluated after those scrapes.
   * Every live target is asked for by name: a target whose last scrape failed has no fresh
   * samples (Prometheus marks its series stale), so the rules would read nothing of it.
   */
  async function settledAfter(time: number): Promise<void> {
    const live = [ports.api, ports.sweeper, ports.survivor].map(instance);
    const selector = `up{instance=~"${live.join("|")}"}`;
    let seen = "nothing yet";
    // Polled every 250 ms, not flat out: three queries a poll at 25 ms took CPU from the very
    // scrapes and rule evaluations this waits for, on a loaded 2-core CI machine.
    const deadline = Date.now() + SETTLE_TIMEOUT_MS;
    // The latest scrape when every target was first seen fresh: a rule evaluation after it read
    // a fresh sample of each. Compared with each poll's latest scrape instead, a rule group
    // evaluated at the phase of one target's scrapes (offsets come from hashes of the group's
    // name and the targets' random ports) never came after it, and the wait ran out.
    let freshBy: number | null = null;
    for (;;) {
      // timestamp() of a selector is its sample's time (of an expression, the query's).
      const up = await prometheus.query(selector);
      const stamps = await prometheus.query(`timestamp(${selector})`);
      const rules = await prometheus.query("min(timestamp(job:up:sum))");
      const fresh = stamps.result.filter((s) => Number(s.value?.[1]) > time + 0.2);
      const allUp = up.result.length === live.length && up.result.every((s) => s.value?.[1] === "1");
      const lastScrape = Math.max(...stamps.result.map((s) => Number(s.value?.[1])));
      const ruled = Number(rules.result[0]?.value?.[1] ?? 0);
      if (allUp && fresh.length === live.length) freshBy ??= lastScrape;
      if (allUp && freshBy !== null && ruled > freshBy) return;
      seen =
        `up ${up.result.map((s) => `${s.metric.instance}=${s.value?.[1]}`).join(" ")}; ` +
        `scraped ${stamps.result.map((s) => `${s.metric.instance}@${(Number(s.value?.[1]) - time).toFixed(2)}s`).join(" ")}; ` +
        `rules @${(ruled - time).toFixed(2)}s (times relative to ${time.toFixed(2)})`;
      if (Date.now() > deadline) break;
      await new Promise((r) => setTimeout(r, 250));
    }
    // What Prometheus says of each target: its last error and how long its last scrape took.
    const targets = (await prometheus.api("/api/v1/targets")) as {
      activeTargets: { scrapeUrl: string; health: string; lastError: string; lastScrapeDuration: number }[];
    };
    const health = targets.activeTargets
      .map((t) => `${t.scrapeUrl} ${t.health} ${t.lastScrapeDuration.toFixed(3)}s ${t.lastError}`)
      .join("\n");
    throw new Error(
      `timed out after ${SETTLE_TIMEOUT_MS} ms waiting for a successful scrape of every live target ` +
        `and a rule evaluation after the fleet went quiet: ${seen}\n${health}\n${prometheus.output()}`,
    );
  }

  type SessionState = { id: string; status: string; tail_state: string; parked_reason: string | null };
  /** The sessions among `ids` with no run queued or running, that meet `condition`. */
  async function sessionsWhere(condition: (row: SessionState) => boolean, ids: string[]) {
    const rows = await fleet.database.sql<SessionState[]>`
      select s.id, s.status, s.tail_state, s.parked_reason from sessions s
       where s.id in ${fleet.database.sql(ids)}
         and not exists (select 1 from runs r where r.session_id = s.id and r.status <> 'ended')`;
    return rows.filter(condition);
  }

  it("shows every resume, crash, park and interrupted call that Postgres holds", async () => {
    if (missing) throw missing;
    const t0 = Date.now();
    // --- The fleet at work --------------------------------------------------------------
    const victim = await fleet.spawnWorker({}, ["--metrics-port", String(ports.victim)]);
    // The worker starts its tools' series at 0 before any call (worker.ts: initToolSeries).
    const fresh = await (await fetch(`http://${instance(ports.victim)}/metrics`)).text();
    for (const tool of [...BUILTIN_TOOLS, UNREGISTERED_TOOL])
      for (const outcome of TOOL_OUTCOMES)
        expect(fresh).toMatch(
          new RegExp(`^fleet_tool_calls_total\\{[^}]*tool="${tool}",outcome="${outcome}"[^}]*\\} 0$`, "m"),
        );
    await scraped(ports.api, ports.sweeper, ports.victim);
    const victimSeenAt = Date.now();

    // Three sessions inside `sleep` on the victim, then a second worker, then the SIGKILL.
    const sleepy = await startSleepySessions(client, 3, { file: "log", sleepMs: 60_000 });
    await waitFor(
      async () => {
        const [row] = await fleet.database.sql<{ n: number }[]>`
          select count(*)::int as n from messages where role = 'tool' and tool_call_id = 'log'`;
        return row!.n === sleepy.length;
      },
      20_000,
      "every session inside the sleep tool",
    );
    const survivor: WorkerProcess = await fleet.spawnWorker({}, ["--metrics-port", String(ports.survivor)]);
    await scraped(ports.survivor);
    const survivorSeenAt = Date.now();
    // See `largest` below: the victim's series must have lived a few seconds first.
    await sleepUntil(victimSeenAt + VICTIM_AGE_MS);
    victim.child.kill("SIGKILL");
    await victim.exited;
    await waitFor(
      async () => (await sessionsWhere((s) => s.tail_state === "completed", sleepy)).length === 3,
      20_000,
      "the interrupted sessions completed",
    );

    // Sessions that end in each other way, all on the survivor.
    const scripted = (steps: ScriptedStep[], extra: { tools?: string[]; maxTurns?: number } = {}) => ({
      agent: { model: { provider: "scripted" as const, steps }, tools: [] as string[], ...extra },
      input: "go",
    });
    const { sessions: batch } = await client.createBatch([
      // Output limit: continued by the sweeper (continue_response).
      scripted([{ text: "the first half", stopReason: "max_output" }, { text: " and the rest" }]),
      // The stream breaks after some output: retried by the sweeper (retry_response).
      scripted([
        { text: "an answer cut in the middle", fault: "stream_cut", faultTimes: 1 },
        { text: "whole" },
      ]),
      // The provider fails every attempt of the first run: provider_error, then call_model.
      scripted([{ text: "at last", fault: "connection", faultTimes: 4 }]),
      // Refused: parked by the sweeper.
      scripted([{ text: "I will not", stopReason: "refusal" }]),
      // A stop reason nobody knows: `other`, unknown_stop, parked.
      scripted([{ text: "hm", stopReason: "a_reason_from_the_future" }]),
      // A failing tool, and a tool this worker does not have, then max_turns: parked at once.
      scripted(
        [
          {
            toolCalls: [
              { id: "f", name: "fail", arguments: { message: "no" } },
              { id: "r", name: "launch_rockets", arguments: {} },
            ],
          },
        ],
        { tools: ["fail"], maxTurns: 1 },
      ),
    ]);
    const ids = batch.map((s) => s.id);
    const [maxOutput, streamCut, providerError, refusal, unknown, maxTurns] = ids as [
      string,
      string,
      string,
      string,
      string,
      string,
    ];
    const expectedEnd: Record<string, string> = {
      [maxOutput]: "completed",
      [streamCut]: "completed",
      [providerError]: "completed",
      [refusal]: "parked:refused",
      [unknown]: "parked:unknown_stop",
      [maxTurns]: "parked:max_turns",
    };
    const state = (s: SessionState) =>
      s.status === "parked" ? `parked:${s.parked_reason?.split(":")[0]}` : s.tail_state;
    await waitFor(
      async () => {
        const done = await sessionsWhere(() => true, ids);
        return done.length === ids.length && done.every((s) => expectedEnd[s.id] === state(s));
      },
      30_000,
      "each scripted session at its expected end",
    ).catch(async (error) => {
      console.log(
        await fleet.database
          .sql`select id, status, tail_state, parked_reason from sessions where id in ${fleet.database.sql(ids)}`,
      );
      console.log(
        await fleet.database
          .sql`select session_id, kind, trigger, status, ended_reason, resume_kind from runs where session_id in ${fleet.database.sql(ids)} order by created_at`,
      );
      throw error;
    });
    // What parked, read from Postgres before the API acts on one of them.
    const parkedTruth: Counts = {};
    for (const s of await fleet.database.sql<{ reason: string }[]>`
      select split_part(parked_reason, ':', 1) as reason from sessions where status = 'parked'`)
      parkedTruth[s.reason] = (parkedTruth[s.reason] ?? 0) + 1;
    expect(parkedTruth).toEqual({ refused: 1, unknown_stop: 1, max_turns: 1 });

    // The API refuses to resume a refusal, and resumes the max_turns session with a model
    // that answers (call_model, trigger api).
    const refusals: Counts = {};
    const refused = await client.resume(refusal).catch((error: unknown) => error);
    expect(refused).toBeInstanceOf(FleetApiError);
    expect((refused as FleetApiError).reason).toBe("refused");
    refusals.refused = 1;
    const resumed = await client.resume(maxTurns, {
      model: { provider: "scripted", steps: [{ text: "unused" }, { text: "done after all" }] },
    });
    expect(resumed.kind).toBe("call_model");
    await client.waitForRun(resumed.runId, { timeoutMs: 15_000 });
    expect(survivor.child.exitCode).toBeNull();

    const run = `${((Date.now() - t0) / 1000).toFixed(1)} s`;

    // --- Ground truth from Postgres -----------------------------------------------------
    const { sql } = fleet.database;
    const resumesTruth: Counts = {};
    for (const r of await sql<{ kind: string; trigger: string; n: number }[]>`
      select resume_kind as kind, trigger, count(*)::int as n from runs
       where kind = 'resume' and started_at is not null and resume_kind is not null group by 1, 2`)
      resumesTruth[key(r.kind, r.trigger)] = r.n;
    const runsTruth: Counts = {};
    for (const r of await sql<{ kind: string; outcome: string; n: number }[]>`
      select kind, ended_reason as outcome, count(*)::int as n from runs where status = 'ended' group by 1, 2`)
      runsTruth[key(r.kind, r.outcome)] = r.n;
    const toolsTruth: Counts = {};
    for (const r of await sql<{ name: string; success: boolean; content: string }[]>`
      select name, success, content from messages where role = 'tool'`) {
      const tool = BUILTIN_TOOLS.includes(r.name) ? r.name : UNREGISTERED_TOOL;
      const outcome = r.content === INTERRUPTED_TEXT ? "interrupted" : r.success ? "ok" : "failed";
      toolsTruth[key(tool, outcome)] = (toolsTruth[key(tool, outcome)] ?? 0) + 1;
    }
    const stopsTruth: Counts = {};
    for (const r of await sql<
      { stop_reason: string }[]
    >`select stop_reason from messages where role = 'assistant'`)
      stopsTruth[stopReasonLabel(r.stop_reason)] = (stopsTruth[stopReasonLabel(r.stop_reason)] ?? 0) + 1;
    const latencies = (
      await sql<{ s: number }[]>`
        select extract(epoch from started_at - last_sign_at)::float8 as s from runs
         where kind = 'resume' and last_sign_at is not null and started_at is not null`
    ).map((r) => r.s);
    const crashed = (runsTruth[key("run", "crashed")] ?? 0) + (runsTruth[key("resume", "crashed")] ?? 0);
    // The scenario happened as planned, so the comparisons below compare something.
    expect(crashed, "a worker was killed inside a tool").toBeGreaterThanOrEqual(1);
    expect(toolsTruth[key("sleep", "interrupted")]).toBe(3);
    for (const kind of RESUME_KINDS)
      expect(
        Object.entries(resumesTruth).some(([k, n]) => k.startsWith(`${kind}|`) && n > 0),
        `a ${kind} resume happened`,
      ).toBe(true);
    expect(resumesTruth[key("call_model", "api")]).toBe(1);
    expect(runsTruth[key("run", "provider_error")]).toBe(1);
    expect(toolsTruth[key(UNREGISTERED_TOOL, "failed")]).toBe(1);
    expect(stopsTruth.other).toBe(1);

    // increase() extrapolates a series' delta to the end of the window, by up to 1.1 scrape
    // intervals while the series is alive (half of one once it is gone), relative to how long
    // it has been sampled: N events counted by a series T seconds old can read up to N·1.1/T
    // too high. On a dashboard's hour that is nothing; here, within seconds of a series'
    // birth, it would round 3 up to 4. So the counts are read once every live series is old
    // enough for the largest count (the victim was made old enough before the kill).
    const largest = Math.max(
      ...[resumesTruth, runsTruth, toolsTruth, stopsTruth, parkedTruth].flatMap((c) => Object.values(c)),
    );
    await sleepUntil(survivorSeenAt + (2.5 * largest + 1) * INTERVAL_S * 1000);
    await settledAfter(Date.now() / 1000);
    // Scrapes Prometheus missed (this busy process's own /metrics answering after the 1 s
    // timeout) change how the rate panels are checked below (support/prometheus-fleet.ts).
    const missed = await missedScrapes(prometheus, startedAt, INTERVAL_S, "prometheus-live");
    const now = Date.now() / 1000;
    // The window every count is taken over: the whole life of this Prometheus.
    const windowSeconds = Math.ceil(now - startedAt) + 5;
    const window = `${windowSeconds}s`;

    // --- What Prometheus says -------------------------------------------------------------
    const q = (expr: string) => prometheus.query(expr, now);
    const increase = (metric: string, by: string[]) =>
      q(`sum by (${by.join(", ")}) (increase(${metric}[${window}]))`).then((r) => rounded(r, by));
    const allPairs = (a: readonly string[], b: readonly string[]) =>
      a.flatMap((x) => b.map((y) => key(x, y)));

    expect(await increase("fleet_resumes_total", ["kind", "trigger"])).toEqual(
      withZeros(resumesTruth, allPairs(RESUME_KINDS, RESUME_TRIGGERS)),
    );
    expect(await increase("fleet_resumes_total", ["kind"])).toEqual(
      withZeros(sumBy(resumesTruth, 0), [...RESUME_KINDS]),
    );
    expect(await increase("fleet_resumes_total", ["trigger"])).toEqual(
      withZeros(sumBy(resumesTruth, 1), [...RESUME_TRIGGERS]),
    );
    const runs = await increase("fleet_runs_total", ["kind", "outcome"]);
    expect(Object.fromEntries(Object.entries(runs).filter(([, n]) => n > 0))).toEqual(runsTruth);
    expect(await increase("fleet_sessions_parked_total", ["reason"])).toEqual(
      withZeros(parkedTruth, [...PARK_REASONS]),
    );
    const tools = await increase("fleet_tool_calls_total", ["tool", "outcome"]);
    expect(Object.fromEntries(Object.entries(tools).filter(([, n]) => n > 0))).toEqual(toolsTruth);
    const stops = await increase("fleet_model_stops_total", ["stop_reason"]);
    expect(Object.fromEntries(Object.entries(stops).filter(([, n]) => n > 0))).toEqual(stopsTruth);
    const refusalCounts = await increase("fleet_resume_refusals_total", ["reason"]);
    expect(Object.fromEntries(Object.entries(refusalCounts).filter(([, n]) => n > 0))).toEqual(refusals);
    expect(rounded(await q(`sum(increase(fleet_crash_to_resume_seconds_count[${window}]))`), [])[""]).toBe(
      latencies.length,
    );
    expect(rounded(await q(`sum(increase(fleet_fenced_writes_total[${window}]))`), [])[""]).toBe(0);

    // --- Every panel of the dashboard ---------------------------------------------------
    const panels = dashboardPanels();
    // Grafana's variables: $__rate_interval is at least 4 scrape intervals; $__range the view.
    const grafana = (expr: string) => grafanaExpr(expr, INTERVAL_S, window);
    const byTitle = new Map<string, { instant?: PromResult; range?: PromResult[] }>();
    for (const panel of panels) {
      const results: { instant?: PromResult; range?: PromResult[] } = {};
      for (const target of panel.targets ?? []) {
        const expr = grafana(target.expr);
        if (target.instant) results.instant = await q(expr);
        else {
          const result = await prometheus.queryRange(expr, Math.floor(startedAt), Math.ceil(now), INTERVAL_S);
          results.range = [...(results.range ?? []), result];
          expect(result.resultType, `${panel.title} ${target.refId}`).toBe("matrix");
        }
      }
      byTitle.set(panel.title, results);
    }
    const instant = (title: string): PromResult => {
      const found = byTitle.get(title)?.instant;
      if (!found) throw new Error(`the dashboard has no instant panel "${title}"`);
      return found;
    };
    const single = (title: string) => rounded(instant(title), [])[""];
    expect(single("Crashed runs")).toBe(crashed);
    expect(single("Sessions parked")).toBe(3);
    expect(single("Tool calls interrupted")).toBe(3);
    expect(rounded(instant("Resumes started, by kind and trigger"), ["kind", "trigger"])).toEqual(
      resumesTruth,
    );
    expect(rounded(instant("Runs ended, by kind and outcome"), ["kind", "outcome"])).toEqual(runsTruth);

    // Rate panels: summed over time, each one's per-second rate comes back to the counts. With
    // scrapes missed, each panel's query with its rate taken over the whole window instead.
    const integral = async (title: string, labels: string[]): Promise<Counts> => {
      const out: Counts = {};
      const add = (s: PromSample, n: number) => {
        const k = key(...labels.map((l) => s.metric[l]));
        out[k] = (out[k] ?? 0) + n;
      };
      if (missed) {
        const panel = panels.find((p) => p.title === title);
        for (const target of (panel?.targets ?? []).filter((t) => !t.instant))
          for (const s of (await q(grafanaExpr(target.expr, INTERVAL_S, window, windowSeconds))).result)
            add(s, Number(s.value?.[1]) * windowSeconds);
        return out;
      }
      for (const result of byTitle.get(title)?.range ?? [])
        for (const s of result.result)
          add(
            s,
            (s.values ?? []).reduce((sum, [, v]) => sum + Number(v) * INTERVAL_S, 0),
          );
      return out;
    };
    expectClose(await integral("Resumes by kind", ["kind"]), sumBy(resumesTruth, 0), "Resumes by kind");
    expectClose(
      await integral("Resumes by trigger", ["trigger"]),
      sumBy(resumesTruth, 1),
      "Resumes by trigger",
    );
    expectClose(
      await integral("Sessions parked by reason", ["reason"]),
      parkedTruth,
      "Sessions parked by reason",
    );
    expectClose(
      await integral("Runs by kind and outcome", ["kind", "outcome"]),
      runsTruth,
      "Runs by kind and outcome",
    );
    expectClose(
      await integral("Tool calls by tool and outcome", ["tool", "outcome"]),
      toolsTruth,
      "Tool calls",
    );
    // Zero-initialised: every resume kind is a series from the start, not only those that happened.
    const kinds = byTitle
      .get("Resumes by kind")!
      .range![0]!.result.map((s) => s.metric.kind)
      .sort();
    expect(kinds).toEqual([...RESUME_KINDS].sort());

    // --- Every recording rule, and the rules' health --------------------------------------
    const recorded = new Map<string, PromResult>();
    for (const { record } of recordingRules()) {
      const result = await q(record);
      expect(result.result.length, `${record} has a value`).toBeGreaterThan(0);
      recorded.set(record, result);
    }
    const five = (name: string, labels: string[]) => {
      const out: Counts = {};
      for (const s of recorded.get(name)!.result) {
        const n = Math.round(Number(s.value?.[1]) * 300);
        if (n > 0) out[key(...labels.map((l) => s.metric[l]))] = n;
      }
      return out;
    };
    expect(five("kind_trigger:fleet_resumes:rate5m", ["kind", "trigger"])).toEqual(resumesTruth);
    expect(five("kind_outcome:fleet_runs:rate5m", ["kind", "outcome"])).toEqual(runsTruth);
    expect(five("tool_outcome:fleet_tool_calls:rate5m", ["tool", "outcome"])).toEqual(toolsTruth);
    expect(five("stop_reason:fleet_model_stops:rate5m", ["stop_reason"])).toEqual(stopsTruth);
    expect(five("reason:fleet_resume_refusals:rate5m", ["reason"])).toEqual(refusals);
    const parkedRule = rounded(recorded.get("reason:fleet_sessions_parked:increase15m")!, ["reason"]);
    expect(parkedRule).toEqual(withZeros(parkedTruth, [...PARK_REASONS]));
    const totalRuns = Object.values(runsTruth).reduce((a, b) => a + b, 0);
    // A sum over many series adds up their extrapolations (see `largest`): within that bound.
    const age = now - survivorSeenAt / 1000;
    const allRuns = Number(recorded.get("fleet:fleet_runs:increase10m")!.result[0]!.value![1]);
    expect(allRuns).toBeGreaterThanOrEqual(totalRuns - 0.5);
    expect(allRuns).toBeLessThanOrEqual(totalRuns * (1 + (1.1 * INTERVAL_S) / age) + 0.5);
    expect(rounded(recorded.get("fleet:fleet_fenced_writes:increase10m")!, [])[""]).toBe(0);
    const ratio = Number(recorded.get("fleet:fleet_runs_provider_error:ratio_rate10m")!.result[0]!.value![1]);
    expect(Math.abs(ratio - 1 / totalRuns)).toBeLessThan(0.02);
    // p99 of a handful of observations sits in the bucket of the slowest one.
    const buckets = [0, 0.05, 0.1, 0.25, 0.5, 1, 2, 5, 10, 30, 60, 120];
    const slowest = Math.max(...latencies);
    const upper = buckets.find((b) => b >= slowest)!;
    const lower = buckets[Math.max(0, buckets.indexOf(upper) - 2)]!;
    const p99 = Number(recorded.get("fleet:fleet_crash_to_resume_seconds:p99_10m")!.result[0]!.value![1]);
    expect(p99, `p99 ${p99} for latencies ${latencies.join(", ")}`).toBeGreaterThanOrEqual(lower);
    expect(p99).toBeLessThanOrEqual(buckets[buckets.indexOf(upper) + 1]!);
    expect(rounded(recorded.get("queue:fleet_queue_jobs_waiting:sum")!, ["queue"])).toEqual({
      runs: 0,
      resumes: 0,
      webhooks: 0,
    });
    expect(rounded(recorded.get("job:up:sum")!, ["job"])).toEqual({
      "fleet-api": 1,
      "fleet-sweeper": 1,
      "fleet-worker": 1,
    });

    const { groups } = await prometheus.api<{
      groups: { name: string; rules: { name: string; health: string; lastError?: string; type: string }[] }[];
    }>("/api/v1/rules");
    const loaded = groups.flatMap((g) => g.rules);
    expect(loaded.filter((r) => r.type === "recording").length).toBe(recordingRules().length);
    for (const rule of loaded) expect(rule.health, `${rule.name}: ${rule.lastError}`).toBe("ok");
    // The alerts say the same: three reasons parked (too few for FleetSessionsParkedRising);
    // the killed worker's target down, pending for its 5 minutes; nothing else.
    const { alerts } = await prometheus.api<{ alerts: { labels: Record<string, string>; state: string }[] }>(
      "/api/v1/alerts",
    );
    const active = alerts
      .map((a) => `${a.labels.alertname}:${a.labels.reason ?? a.labels.instance ?? ""} ${a.state}`)
      .sort();
    expect(active).toEqual([
      "FleetSessionsParked:max_turns firing",
      "FleetSessionsParked:refused firing",
      "FleetSessionsParked:unknown_stop firing",
      `FleetTargetDown:${instance(ports.victim)} pending`,
    ]);

    console.log(
      `prometheus-live: ${run} of fleet activity; resumes ${JSON.stringify(resumesTruth)}, ` +
        `crash → resume ${latencies.map((l) => l.toFixed(2)).join("/")} s (p99 by Prometheus ${p99.toFixed(2)} s)`,
    );
  }, 90_000);
});

function sleepUntil(time: number): Promise<void> {
  return new Promise((resolve) => setTimeout(resolve, Math.max(0, time - Date.now())));
}

/** Counts keyed "a|b" summed by their `index`-th part. */
function sumBy(counts: Counts, index: number): Counts {
  const out: Counts = {};
  for (const [k, n] of Object.entries(counts)) {
    const part = k.split("|")[index]!;
    out[part] = (out[part] ?? 0) + n;
  }
  return out;
}
