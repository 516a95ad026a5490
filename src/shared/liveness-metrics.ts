/**
 * Whether the worker and the sweeper still do their job, which `up` alone does not tell: the
 * worker's heartbeat age, the age of the sweeper's passes, and running runs that make no
 * progress. Each role adds its own gauges to its metrics' registry (metrics.ts).
 */
import { Gauge, type Registry } from "prom-client";

/**
 * The worker's own liveness as the sweeper sees it: seconds since Redis last accepted this
 * worker's heartbeat, and the TTL after which it lapses (LEASE_TTL_MS). Past the TTL the
 * sweeper may take the worker for dead though it still answers scrapes.
 */
export function initWorkerLiveness(
  metrics: { registry: Registry },
  ttlMs: number,
  lastBeatAt: () => number,
  now: () => number = Date.now,
): void {
  const registers = [metrics.registry];
  new Gauge({
    name: "fleet_worker_heartbeat_age_seconds",
    help: "Seconds since Redis last accepted this worker's heartbeat (its liveness signal).",
    registers,
    collect() {
      this.set(Math.max(0, now() - lastBeatAt()) / 1000);
    },
  });
  new Gauge({
    name: "fleet_worker_heartbeat_ttl_seconds",
    help: "A heartbeat older than this has lapsed (LEASE_TTL_MS): the sweeper may take the worker for dead.",
    registers,
  }).set(ttlMs / 1000);
}

/** The sweeper's two passes (sweeper-process.ts): dead and frozen workers, and the wide scan. */
export const SWEEPER_PASSES = ["liveness", "wide"] as const;

/**
 * Seconds since each of the sweeper's passes last ended well. A sweeper that answers scrapes
 * but does not sweep (a statement stuck in Postgres, Postgres or Redis away) shows here;
 * `up` alone does not tell it.
 */
export function initSweeperPasses(
  metrics: { registry: Registry },
  lastDoneAt: (pass: (typeof SWEEPER_PASSES)[number]) => number,
  now: () => number = Date.now,
): void {
  new Gauge({
    name: "fleet_sweeper_pass_age_seconds",
    help: "Seconds since the sweeper's pass last ended without an error (liveness: dead and frozen workers; wide: interrupted sessions, batches, webhooks' ends); from the process start before the first.",
    labelNames: ["pass"] as const,
    registers: [metrics.registry],
    collect() {
      for (const pass of SWEEPER_PASSES) this.set({ pass }, Math.max(0, now() - lastDoneAt(pass)) / 1000);
    },
  });
}

/**
 * How often each of the sweeper's passes is meant to end (liveness: every SWEEP_INTERVAL_MS
 * tick; wide: every few ticks, sweep-pass.ts): a healthy pass's age goes up to about this
 * between two ends, so what counts as stuck scales with it (FleetSweeperStuck, FleetRunStuck).
 * Set once at the start, for both passes.
 */
export function initSweeperIntervals(
  metrics: { registry: Registry },
  intervalMs: Record<(typeof SWEEPER_PASSES)[number], number>,
): void {
  const gauge = new Gauge({
    name: "fleet_sweeper_interval_seconds",
    help: "How often the sweeper's pass runs when nothing wakes it earlier (liveness: SWEEP_INTERVAL_MS; wide: every 5th tick): a healthy pass's age goes up to about this.",
    labelNames: ["pass"] as const,
    registers: [metrics.registry],
  });
  for (const pass of SWEEPER_PASSES) gauge.set({ pass }, intervalMs[pass] / 1000);
}

/** The sweeper's view of running runs' progress (sweeper/run-progress.ts sets them each liveness pass). */
export type RunProgressGauges = { oldestAge: Gauge; stuck: Gauge };

/**
 * Runs that are running but make no progress while their worker stays alive (a tool that
 * never returns): the sweeper resumes only runs whose worker died or froze, so these would
 * show nowhere else. Both gauges start at 0; the threshold is exported beside them.
 */
export function initRunProgress(metrics: { registry: Registry }, stuckAfterMs: number): RunProgressGauges {
  const registers = [metrics.registry];
  const oldestAge = new Gauge({
    name: "fleet_run_progress_age_seconds",
    help: "Seconds since the running run longest without progress last made some (an append to its session, or its start), as of the sweeper's last liveness pass; 0 when no run is running.",
    registers,
  });
  const stuck = new Gauge({
    name: "fleet_runs_stuck",
    help: "Running runs with no progress for longer than FLEET_RUN_STUCK_AFTER_MS, as of the sweeper's last liveness pass.",
    registers,
  });
  new Gauge({
    name: "fleet_run_stuck_after_seconds",
    help: "FLEET_RUN_STUCK_AFTER_MS: a running run with no progress for longer counts as stuck (fleet_runs_stuck, FleetRunStuck).",
    registers,
  }).set(stuckAfterMs / 1000);
  oldestAge.set(0);
  stuck.set(0);
  return { oldestAge, stuck };
}
