/**
 * run-progress.ts: the longest time without progress among running runs, which of them are
 * stuck, and the gauges and log the sweeper makes of them (their series at 0 from the start).
 */
import { describe, expect, it } from "vitest";
import { createMetrics, initRunProgress } from "../src/shared/metrics.js";
import { newlyStuck, progressOf, RunProgress } from "../src/sweeper/run-progress.js";

const run = (id: string, seconds: number) => ({
  id,
  session_id: `s-${id}`,
  worker_id: "w1",
  progress_age_ms: seconds * 1000,
});

describe("run progress", () => {
  it("finds the longest time without progress and the runs past the threshold", () => {
    expect(progressOf([], 60_000)).toEqual({ oldestMs: 0, stuck: [] });
    const runs = [run("a", 5), run("b", 61), run("c", 60), run("d", 3600)];
    expect(progressOf(runs, 60_000)).toEqual({ oldestMs: 3_600_000, stuck: [runs[1], runs[3]] });
    // A clock a little behind (a negative age) reads as none.
    expect(progressOf([run("e", -2)], 60_000)).toEqual({ oldestMs: 0, stuck: [] });
  });

  it("says which stuck runs were not stuck before", () => {
    expect(newlyStuck([run("a", 90), run("b", 90)], new Set(["a"])).map((r) => r.id)).toEqual(["b"]);
  });

  it("exports the gauges at 0 before any look, sets them at each, and logs each stuck run once", async () => {
    const metrics = createMetrics("sweeper");
    const gauges = initRunProgress(metrics, 60_000);
    const values = async () =>
      Object.fromEntries(
        (await metrics.registry.getMetricsAsJSON())
          .filter((m) => /^fleet_run(s_stuck|_progress_age_seconds|_stuck_after_seconds)$/.test(m.name))
          .map((m) => [m.name, m.values.map((v) => v.value)]),
      );
    expect(await values()).toEqual({
      fleet_run_progress_age_seconds: [0],
      fleet_runs_stuck: [0],
      fleet_run_stuck_after_seconds: [60],
    });
    const warned: unknown[] = [];
    const progress = new RunProgress({
      gauges,
      stuckAfterMs: 60_000,
      log: { warn: (fields: unknown) => void warned.push(fields) } as never,
    });
    progress.observe([run("a", 10), run("b", 90)]);
    progress.observe([run("a", 70), run("b", 91)]);
    expect(await values()).toMatchObject({ fleet_run_progress_age_seconds: [91], fleet_runs_stuck: [2] });
    expect(warned).toEqual([
      expect.objectContaining({ runId: "b", sessionId: "s-b", workerId: "w1", sinceProgressS: 90 }),
      expect.objectContaining({ runId: "a", sinceProgressS: 70 }),
    ]);
    // b made progress, then stopped again: a new stuck spell, logged again.
    progress.observe([run("a", 130), run("b", 1)]);
    progress.observe([run("a", 131), run("b", 61)]);
    expect(warned).toHaveLength(3);
    progress.observe([]);
    expect(await values()).toMatchObject({ fleet_run_progress_age_seconds: [0], fleet_runs_stuck: [0] });
  });
});
