/**
 * Riding out a short Postgres outage (a restart, a failover) in the middle of a run. A write
 * of a run in progress — an append (a model step, a tool's result), a run's end, a model
 * call's reservation, the cancel check before a tool — that fails because Postgres is
 * unavailable (unavailable.ts) no longer fails the job at once: the worker keeps the session
 * (its lease is renewed in Redis as before), keeps what it was storing in memory, and sends
 * the same fenced write again with a capped backoff for up to `windowMs`
 * (FLEET_WORKER_DB_RIDEOUT_MS), so a tool that finished during the outage has its result
 * stored instead of answered as interrupted by a resume, and a model answer is not asked for
 * again. Past the window the last error is thrown: the job fails exactly as it did before.
 * Once the job is stopped (shutdown, cancel, lost lease: its AbortSignal), a write waiting
 * for its next try gets one last try (Postgres may be back: a cancel commits there first),
 * then the error is thrown as well.
 *
 * What stays as it was: every try is the same fenced statement, through the lease guard, so
 * a worker whose session was taken meanwhile is refused (FencedError) and appends nothing;
 * an append whose first try committed but whose answer was lost is found committed before it
 * is sent again (committed-appends.ts), never stored twice, and so is one still running in
 * Postgres when its retry looked, found once the retry meets its commit (`sentOnce`); a model
 * call's reservation carries one key on every try, so one whose answer was lost is counted
 * once (fenced-writes.ts), and so do a failed attempt's billed tokens (billed-tokens.ts); and
 * the run's next tool cannot start before the write before it went through (the agent loop
 * awaits it). A run's end (`endRun`) and the cancel check are safe to send again as they
 * are: an ended run is not ended again (the retry answers the session's next queued run, as
 * the first try did), and the check only reads.
 * The writes a run makes, wrapped so: rideout-writes.ts.
 */
import type { Logger } from "pino";
import { FencedError } from "../shared/errors.js";
import type { DbRideoutResult } from "../shared/metrics.js";
import { isServiceUnavailable } from "../shared/unavailable.js";
import type { Sleep } from "./models/scripted.js";

/** The first pause before a write is sent again, and the longest. */
export const RIDEOUT_FIRST_DELAY_MS = 100;
export const RIDEOUT_MAX_DELAY_MS = 2_000;

export type RideoutDeps = {
  /** How long after its first failure a write is tried again; 0: never. */
  windowMs: number;
  /** The job's signal: aborted, the ride-out ends (the job fails as before). */
  signal: AbortSignal;
  sleep: Sleep;
  sessionId: string;
  log: Pick<Logger, "warn" | "info">;
  /** Told how each ride-out ended (`fleet_db_rideouts_total{result}`). */
  onResult?: (result: DbRideoutResult) => void;
  /** A monotonic clock in ms (default performance.now). */
  now?: () => number;
  random?: () => number;
};

/**
 * The pause before try `retries + 1` (pure): 100 ms doubling up to 2 s, less up to a quarter
 * at random (a fleet's writes do not all knock at once).
 */
export function rideoutDelayMs(retries: number, random: () => number = Math.random): number {
  const base = Math.min(RIDEOUT_FIRST_DELAY_MS * 2 ** Math.max(0, retries), RIDEOUT_MAX_DELAY_MS);
  return Math.round(base * (0.75 + random() / 4));
}

/**
 * What to do after a failed try (pure): try again after `delayMs`, or give up — the job was
 * stopped, or the window since the first failure is spent. The last try falls at the window's end.
 */
export function nextRideoutStep(
  state: { elapsedMs: number; windowMs: number; retries: number; aborted: boolean },
  random: () => number = Math.random,
): { retry: true; delayMs: number } | { retry: false } {
  if (state.aborted || state.elapsedMs >= state.windowMs) return { retry: false };
  return {
    retry: true,
    delayMs: Math.min(rideoutDelayMs(state.retries, random), state.windowMs - state.elapsedMs),
  };
}

/**
 * Runs `attempt(false)`; when it fails with Postgres unavailable, keeps trying `attempt(true)`
 * as `nextRideoutStep` says. A FencedError ends it at once (counted `fenced`), as does any
 * error that is not an outage (counted `gave_up`, thrown as it is).
 */
export async function rideOut<T>(
  what: string,
  attempt: (retry: boolean) => Promise<T>,
  deps: RideoutDeps,
): Promise<T> {
  let failure: unknown;
  try {
    return await attempt(false);
  } catch (error) {
    if (deps.windowMs <= 0 || !isServiceUnavailable(error) || deps.signal.aborted) throw error;
    failure = error;
  }
  const now = deps.now ?? (() => performance.now());
  const startedAt = now();
  const fields = { sessionId: deps.sessionId, write: what };
  deps.log.warn(
    { ...fields, err: messageOf(failure), windowMs: deps.windowMs },
    "Postgres unavailable: keeping the session and trying the write again",
  );
  for (let retries = 0; ; retries++) {
    const step = nextRideoutStep(
      { elapsedMs: now() - startedAt, windowMs: deps.windowMs, retries, aborted: deps.signal.aborted },
      deps.random,
    );
    if (!step.retry) {
      deps.onResult?.("gave_up");
      deps.log.warn(
        { ...fields, err: messageOf(failure), tries: retries + 1, stopped: deps.signal.aborted },
        deps.signal.aborted
          ? "Postgres still unavailable and the job is stopping: giving the session up"
          : "Postgres still unavailable past FLEET_WORKER_DB_RIDEOUT_MS: giving the session up",
      );
      throw failure;
    }
    // Stopped while it waits (a cancel, a shutdown, a lost lease): the write gets one last
    // try, as any write made after a stop gets one, answered within RIDEOUT_MAX_DELAY_MS
    // whatever the signal says. Postgres may well answer again by then: a cancel commits there
    // before the API publishes it to this worker. Given up at once with the outage's stale
    // error, a tool's result was lost and the run ended crashed instead of cancelled.
    const lastTry = await deps.sleep(step.delayMs, deps.signal).then(
      () => false,
      () => true,
    );
    // A try still unanswered when the window is over (at least RIDEOUT_MAX_DELAY_MS after it
    // was sent), or when the job stops, is not waited for: the job gives up as it would have.
    // Its statement, should Postgres still run it, is fenced like any other write: a holder
    // that takes the session next moves the epoch first.
    const waitMs = lastTry
      ? RIDEOUT_MAX_DELAY_MS
      : Math.max(deps.windowMs - (now() - startedAt), RIDEOUT_MAX_DELAY_MS);
    const settled = await settleWithin(attempt(true), waitMs, lastTry ? NEVER_STOPPED : deps.signal);
    if (settled === null) {
      deps.onResult?.("gave_up");
      deps.log.warn(
        { ...fields, err: messageOf(failure), tries: retries + 2, stopped: deps.signal.aborted },
        "Postgres did not answer the write in FLEET_WORKER_DB_RIDEOUT_MS: giving the session up",
      );
      throw failure;
    }
    if ("value" in settled) {
      deps.onResult?.("stored");
      deps.log.info(
        { ...fields, tries: retries + 2, afterMs: Math.round(now() - startedAt) },
        "Postgres answers again: the write went through, the run goes on",
      );
      return settled.value;
    }
    const error = settled.error;
    if (error instanceof FencedError) {
      deps.onResult?.("fenced");
      throw error;
    }
    if (!isServiceUnavailable(error) || lastTry) {
      deps.onResult?.("gave_up");
      if (lastTry && isServiceUnavailable(error))
        deps.log.warn(
          { ...fields, err: messageOf(error), tries: retries + 2, stopped: true },
          "Postgres still unavailable and the job is stopping: giving the session up",
        );
      throw error;
    }
    failure = error;
  }
}

/** The signal of the last try after a stop: its wait is bounded by its timer alone. */
const NEVER_STOPPED = new AbortController().signal;

/**
 * How `promise` settled within `ms`, or null when it did not (or `signal` was aborted first);
 * a promise left behind settles unobserved, never as an unhandled rejection.
 */
export function settleWithin<T>(
  promise: Promise<T>,
  ms: number,
  signal: AbortSignal,
): Promise<{ value: T } | { error: unknown } | null> {
  return new Promise((resolve) => {
    const done = (outcome: { value: T } | { error: unknown } | null) => {
      clearTimeout(timer);
      signal.removeEventListener("abort", onAbort);
      resolve(outcome);
    };
    const onAbort = () => done(null);
    const timer = setTimeout(() => done(null), ms);
    signal.addEventListener("abort", onAbort, { once: true });
    if (signal.aborted) done(null);
    promise.then(
      (value) => done({ value }),
      (error: unknown) => done({ error }),
    );
  });
}

function messageOf(error: unknown): string {
  return error instanceof Error ? error.message : String(error);
}
