/**
 * Runs that are running but make no progress while their worker stays alive. The sweeper
 * resumes runs whose worker died or froze (its lease lapsed); a worker that is alive and
 * renews its lease while one of its runs waits forever — a tool that never returns, which no
 * time limit bounds (model steps and extension hooks have theirs) — looks healthy to it.
 * Each liveness pass reads every running run's time since its session's last append
 * (sweep-queries.ts `runningRuns`, read anyway for the dead and frozen workers), and this
 * exports the longest, counts those past FLEET_RUN_STUCK_AFTER_MS, and logs each once.
 */
import type { Logger } from "pino";
import type { RunProgressGauges } from "../shared/metrics.js";
import type { RunningRun } from "./sweep-queries.js";

export type ProgressRun = Pick<RunningRun, "id" | "session_id" | "worker_id" | "progress_age_ms">;

/** The longest time without progress among `running` (0: none), and those past `stuckAfterMs`. */
export function progressOf<R extends ProgressRun>(
  running: readonly R[],
  stuckAfterMs: number,
): { oldestMs: number; stuck: R[] } {
  let oldestMs = 0;
  const stuck: R[] = [];
  for (const run of running) {
    const age = Math.max(0, run.progress_age_ms ?? 0);
    if (age > oldestMs) oldestMs = age;
    if (age > stuckAfterMs) stuck.push(run);
  }
  return { oldestMs, stuck };
}

/** Which of `stuck` were not stuck at the previous look (`before`: their run ids), to log once. */
export function newlyStuck<R extends ProgressRun>(stuck: readonly R[], before: ReadonlySet<string>): R[] {
  return stuck.filter((run) => !before.has(run.id));
}

export class RunProgress {
  /** Runs stuck at the last look: logged already. Only these are kept (no more than are running). */
  private logged = new Set<string>();

  constructor(
    private readonly deps: {
      gauges: RunProgressGauges;
      stuckAfterMs: number;
      log: Pick<Logger, "warn">;
    },
  ) {}

  /** Called with every running run, at each liveness pass (an empty list: none is running). */
  observe(running: readonly ProgressRun[]): void {
    const { oldestMs, stuck } = progressOf(running, this.deps.stuckAfterMs);
    this.deps.gauges.oldestAge.set(oldestMs / 1000);
    this.deps.gauges.stuck.set(stuck.length);
    for (const run of newlyStuck(stuck, this.logged))
      this.deps.log.warn(
        {
          sessionId: run.session_id,
          runId: run.id,
          workerId: run.worker_id,
          sinceProgressS: Math.round(run.progress_age_ms / 1000),
          stuckAfterMs: this.deps.stuckAfterMs,
        },
        "run making no progress: its session has had no append for longer than FLEET_RUN_STUCK_AFTER_MS while it runs (a tool that does not return?)",
      );
    this.logged = new Set(stuck.map((run) => run.id));
  }
}
