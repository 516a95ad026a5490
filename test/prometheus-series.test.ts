/**
 * src/shared/metrics.ts starts every label combination the code can produce at 0, so that
 * Prometheus sees each series before its first event and rate()/increase() count that
 * event. The label sets are the code's own constants: this file checks they hold every
 * value the code emits (what tsc cannot see), and that every process exports them.
 */
import { describe, expect, expectTypeOf, it } from "vitest";
import { EVENT_TYPES } from "../src/shared/events.js";
import {
  BATCH_EVENT_TYPES,
  createMetrics,
  DB_RIDEOUT_RESULTS,
  DELETE_TRIGGERS,
  EVENT_STREAM_KINDS,
  HOOK_NAMES,
  initSweeperIntervals,
  initSweeperPasses,
  initToolSeries,
  initWorkerLiveness,
  LEASE_RETAKE_RESULTS,
  LEASE_WAIT_RESULTS,
  MODEL_TOKEN_KINDS,
  MODEL_TOKEN_PROVIDERS,
  REFUSAL_REASONS,
  REQUEST_LIMITS,
  RESUME_TRIGGERS,
  RETENTION_RESULTS,
  RUN_KINDS,
  STOP_REASON_LABELS,
  TOOL_OUTCOMES,
  UNREGISTERED_TOOL,
  WEBHOOK_OUTCOMES,
} from "../src/shared/metrics.js";
import { PARK_REASONS, type ParkReason } from "../src/shared/resume-policy.js";
import { NOT_RESUMABLE_REASONS, RESUME_KINDS } from "../src/shared/resume-reasons.js";
import { RUN_OUTCOMES, type RunOutcome } from "../src/shared/run-outcomes.js";
import { STOP_REASONS, stopReasonLabel } from "../src/shared/stop-reasons.js";
import type { AutomaticResumes } from "../src/shared/store/automatic-resumes.js";
import { passIntervalsMs, sweepPass, WIDE_SCAN_EVERY } from "../src/sweeper/sweep-pass.js";
import type { SweepQueries } from "../src/sweeper/sweep-queries.js";
import { builtinTools } from "../src/worker/tools/builtin.js";
import { ToolRegistry, toolLabel } from "../src/worker/tools/registry.js";

type Sample = { name: string; labels: Record<string, string>; value: number };

/** The samples of a /metrics text. */
function samples(text: string): Sample[] {
  return text.split("\n").flatMap((line) => {
    const m = /^([a-z_:]+)(?:\{(.*)\})? (\S+)$/.exec(line);
    if (!m) return [];
    const labels = Object.fromEntries(
      [...(m[2] ?? "").matchAll(/(\w+)="([^"]*)"/g)].map((l) => [l[1]!, l[2]!]),
    );
    return [{ name: m[1]!, labels, value: Number(m[3]) }];
  });
}

/** Every combination of the given label values. */
function combinations(sets: Record<string, readonly string[]>): Record<string, string>[] {
  return Object.entries(sets).reduce<Record<string, string>[]>(
    (acc, [label, values]) => acc.flatMap((partial) => values.map((v) => ({ ...partial, [label]: v }))),
    [{}],
  );
}

/** The fixed label sets of contracts.md §6, as the code knows them. */
const FIXED: Record<string, Record<string, readonly string[]>> = {
  fleet_resumes_total: { kind: RESUME_KINDS, trigger: RESUME_TRIGGERS },
  fleet_resume_refusals_total: { reason: REFUSAL_REASONS },
  fleet_runs_total: { kind: RUN_KINDS, outcome: RUN_OUTCOMES },
  fleet_model_stops_total: { stop_reason: STOP_REASON_LABELS },
  fleet_sessions_parked_total: { reason: PARK_REASONS },
  fleet_tool_calls_total: { tool: [UNREGISTERED_TOOL], outcome: TOOL_OUTCOMES },
  fleet_model_tokens_total: { provider: MODEL_TOKEN_PROVIDERS, kind: MODEL_TOKEN_KINDS },
  fleet_events_written_total: { type: [...EVENT_TYPES, ...BATCH_EVENT_TYPES] },
  fleet_hook_failures_total: { hook: HOOK_NAMES },
  fleet_sessions_deleted_total: { trigger: DELETE_TRIGGERS },
  fleet_webhook_deliveries_total: { outcome: WEBHOOK_OUTCOMES },
  fleet_retention_passes_total: { result: RETENTION_RESULTS },
  fleet_requests_limited_total: { limit: REQUEST_LIMITS },
  fleet_lease_retakes_total: { result: LEASE_RETAKE_RESULTS },
  fleet_db_rideouts_total: { result: DB_RIDEOUT_RESULTS },
  fleet_event_places_gone_total: { stream: EVENT_STREAM_KINDS },
  fleet_lease_wait_seconds_count: { result: LEASE_WAIT_RESULTS },
  // Unlabelled: one series, at 0 on every role (only sweepers count).
  fleet_redis_data_losses_total: {},
};

describe("metrics start at 0 (src/shared/metrics.ts)", () => {
  it("the label sets are the code's: contracts §6 and every value the code emits", () => {
    expect(RESUME_TRIGGERS).toEqual(["api", "sweeper", "worker"]);
    expect(RUN_KINDS).toEqual(["run", "resume"]);
    expect(REFUSAL_REASONS).toEqual([...NOT_RESUMABLE_REASONS, "running"]);
    expect(REFUSAL_REASONS).toHaveLength(7);
    expect(STOP_REASON_LABELS).toEqual([...STOP_REASONS, "other"]);
    expect(stopReasonLabel("a_reason_nobody_knows")).toBe("other");
    expect(TOOL_OUTCOMES).toEqual(["ok", "failed", "interrupted"]);
    expect(toolLabel(new ToolRegistry(), "no_such_tool")).toBe(UNREGISTERED_TOOL);
    // The sweeper ends abandoned runs `crashed` or `stalled`; both are run outcomes.
    expectTypeOf<Parameters<SweepQueries["endAbandonedRun"]>[1]>().toExtend<RunOutcome>();
    expect(RUN_OUTCOMES).toEqual(
      expect.arrayContaining(["crashed", "stalled", "provider_error", "completed"]),
    );
    // Every reason the fleet parks with: AutomaticResumes' decisions, and the outcomes the
    // worker parks at once (session-job.ts).
    expectTypeOf<
      Extract<Awaited<ReturnType<AutomaticResumes["schedule"]>>, { action: "park" }>["reason"]
    >().toExtend<ParkReason>();
    for (const outcome of ["max_turns", "budget_exhausted", "invalid_agent", "storage_rejected"] as const)
      expect(PARK_REASONS).toContain(outcome);
    for (const set of [
      RESUME_TRIGGERS,
      RUN_KINDS,
      REFUSAL_REASONS,
      STOP_REASON_LABELS,
      RUN_OUTCOMES,
      PARK_REASONS,
    ])
      expect(new Set(set).size).toBe(set.length);
  });

  it.each(["api", "worker", "sweeper"])("the %s exports every fixed combination at 0", async (role) => {
    const metrics = createMetrics(role, role === "api" ? { queueDepths: async () => [] } : {});
    const exported = samples(await metrics.registry.metrics());
    for (const [name, sets] of Object.entries(FIXED)) {
      const mine = exported.filter((s) => s.name === name);
      const expected = combinations(sets);
      expect(mine, name).toHaveLength(expected.length);
      for (const labels of expected) {
        const found = mine.find((s) => Object.entries(labels).every(([k, v]) => s.labels[k] === v));
        expect(found, `${name} ${JSON.stringify(labels)}`).toBeDefined();
        expect(found!.value).toBe(0);
        expect(found!.labels.role).toBe(role);
      }
    }
    // No labels: a counter and a histogram start at 0 by themselves.
    expect(exported.find((s) => s.name === "fleet_fenced_writes_total")?.value).toBe(0);
    expect(exported.find((s) => s.name === "fleet_auth_failures_total")?.value).toBe(0);
    expect(exported.find((s) => s.name === "fleet_crash_to_resume_seconds_count")?.value).toBe(0);
    expect(exported.filter((s) => s.name === "fleet_crash_to_resume_seconds_bucket").length).toBeGreaterThan(
      5,
    );
  });

  it("initToolSeries starts each registered tool × outcome at 0, and counting goes on from there", async () => {
    const metrics = createMetrics("worker");
    const tools = new ToolRegistry().register(...builtinTools("/tmp/unused"));
    initToolSeries(metrics, tools.names());
    metrics.toolCalls.inc({ tool: "sleep", outcome: "interrupted" });
    const calls = samples(await metrics.registry.metrics()).filter(
      (s) => s.name === "fleet_tool_calls_total",
    );
    expect(tools.names()).toEqual(expect.arrayContaining(["write_file", "append_file", "sleep", "fail"]));
    expect(calls).toHaveLength((tools.names().length + 1) * TOOL_OUTCOMES.length);
    for (const labels of combinations({
      tool: [...tools.names(), UNREGISTERED_TOOL],
      outcome: TOOL_OUTCOMES,
    })) {
      const found = calls.find((s) => s.labels.tool === labels.tool && s.labels.outcome === labels.outcome);
      expect(found?.value, JSON.stringify(labels)).toBe(
        labels.tool === "sleep" && labels.outcome === "interrupted" ? 1 : 0,
      );
    }
  });

  it("a worker exports its heartbeat's age (seconds since Redis last took one) and TTL", async () => {
    const metrics = createMetrics("worker");
    let last = 10_000;
    initWorkerLiveness(
      metrics,
      2_000,
      () => last,
      () => 13_500,
    );
    const value = async (name: string) =>
      samples(await metrics.registry.metrics()).find((s) => s.name === name)?.value;
    expect(await value("fleet_worker_heartbeat_age_seconds")).toBe(3.5);
    expect(await value("fleet_worker_heartbeat_ttl_seconds")).toBe(2);
    last = 13_400;
    expect(await value("fleet_worker_heartbeat_age_seconds")).toBeCloseTo(0.1);
  });

  it("the sweeper exports how often each pass runs, from its start", async () => {
    const metrics = createMetrics("sweeper");
    // SWEEP_INTERVAL_MS 90 s (a quiet sweeper): liveness every tick, the wide scan every 5th.
    expect(passIntervalsMs(90_000)).toEqual({ liveness: 90_000, wide: 90_000 * WIDE_SCAN_EVERY });
    initSweeperIntervals(metrics, passIntervalsMs(90_000));
    const intervals = Object.fromEntries(
      samples(await metrics.registry.metrics())
        .filter((s) => s.name === "fleet_sweeper_interval_seconds")
        .map((s) => [s.labels.pass, s.value]),
    );
    expect(intervals).toEqual({ liveness: 90, wide: 450 });
  });

  it("the sweeper exports each pass's age: seconds since it last ended well", async () => {
    const metrics = createMetrics("sweeper");
    const doneAt = { liveness: 10_000, wide: 4_000 };
    initSweeperPasses(
      metrics,
      (pass) => doneAt[pass],
      () => 13_500,
    );
    const ages = async () =>
      Object.fromEntries(
        samples(await metrics.registry.metrics())
          .filter((s) => s.name === "fleet_sweeper_pass_age_seconds")
          .map((s) => [s.labels.pass, s.value]),
      );
    expect(await ages()).toEqual({ liveness: 3.5, wide: 9.5 });
    doneAt.wide = 13_500;
    expect(await ages()).toEqual({ liveness: 3.5, wide: 0 });
    // What moves doneAt (sweeper-process.ts): a pass that ended without an error, not a failed one.
    let ended = 0;
    let fail = true;
    const pass = sweepPass(
      { warn: () => {} },
      "wide scan",
      async () => {
        if (fail) throw new Error("statement timeout");
      },
      () => false,
      () => ended++,
    );
    await pass.run();
    expect(ended).toBe(0);
    fail = false;
    await pass.run();
    expect(ended).toBe(1);
  });

  it("carries no id in any label: only the fixed sets, tool names and role", async () => {
    const metrics = createMetrics("worker");
    initToolSeries(metrics, ["write_file"]);
    const known = new Set<string>([
      ...Object.values(FIXED).flatMap((sets) => Object.values(sets).flat()),
      "write_file",
      "worker",
    ]);
    for (const s of samples(await metrics.registry.metrics())) {
      if (!s.name.startsWith("fleet_") || s.name.startsWith("fleet_process_")) continue;
      for (const [label, value] of Object.entries(s.labels))
        if (label !== "le") expect(known, `${s.name} ${label}="${value}"`).toContain(value);
    }
  });
});
