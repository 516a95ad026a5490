/**
 * A pass of the sweeper's tick (sweeper-process.ts): `run()` does nothing while the previous
 * run is still going. Failures are logged once when they start (Postgres or Redis away), not
 * at every tick, and again when the error changes; once when the pass works again.
 */
import type { Logger } from "pino";

/** Scans other than the liveness check run once every this many ticks (or on an event). */
export const WIDE_SCAN_EVERY = 5;

/** How often each pass runs when nothing wakes it earlier (fleet_sweeper_interval_seconds). */
export function passIntervalsMs(sweepIntervalMs: number): { liveness: number; wide: number } {
  return { liveness: sweepIntervalMs, wide: sweepIntervalMs * WIDE_SCAN_EVERY };
}

export type SweepPass = {
  run: () => Promise<void>;
  readonly running: boolean;
  /** Settles when the run under way ends (at once when none is): what a stop waits for. */
  readonly ended: Promise<void>;
};

export function sweepPass(
  log: Pick<Logger, "warn">,
  name: string,
  pass: () => Promise<void>,
  /** true once the process stops: a failure then (its statement cancelled) is not logged. */
  stopping: () => boolean = () => false,
  /** Called each time the pass ends without an error. */
  done: () => void = () => {},
): SweepPass {
  let running = false;
  let failed = 0;
  let lastFailure = "";
  let current: Promise<void> = Promise.resolve();
  /** One run; never rejects (its failure is logged). */
  const once = async () => {
    try {
      await pass();
      done();
      if (failed > 0) log.warn({ pass: name, failedTicks: failed }, "sweeps work again");
      failed = 0;
    } catch (error) {
      if (stopping()) return;
      const text = error instanceof Error ? error.message : String(error);
      if (failed === 0 || text !== lastFailure)
        log.warn({ err: error, pass: name }, "sweep failed; retrying every tick, quietly until it works");
      lastFailure = text;
      failed++;
    } finally {
      running = false;
    }
  };
  return {
    get running() {
      return running;
    },
    get ended() {
      return current;
    },
    run() {
      if (running) return Promise.resolve();
      running = true;
      current = once();
      return current;
    },
  };
}
