/** Process helpers every role uses when it shuts down. */
import type { Logger } from "pino";

/** Closes every resource, in order, even when one close throws. */
export async function closeAll(
  closers: (() => Promise<unknown>)[],
  log: Pick<Logger, "warn">,
): Promise<void> {
  for (const close of closers) {
    try {
      await close();
    } catch (error) {
      log.warn({ err: error }, "close failed");
    }
  }
}

/**
 * How long a stop waits for what may never end while Redis is away before it goes on and
 * closes the connections (a command still waiting is then never answered): BullMQ's
 * `Worker.close()` never resolves while its Redis is away (taskforcesh/bullmq#4656), nor does
 * a pass or a job's last write waiting on a Redis command, and a stop must not wait for Redis
 * to come back. Used by the sweeper's and the worker's stop.
 */
export const STOP_WAIT_MS = 11_000;

/**
 * Waits for `closing` at most `waitMs` (STOP_WAIT_MS, or what a stop has left of it); then the
 * stop goes on without it, with a warning.
 */
export async function closeWithin(
  closing: Promise<unknown>,
  what: string,
  log: Pick<Logger, "warn">,
  waitMs = STOP_WAIT_MS,
): Promise<void> {
  let timer: NodeJS.Timeout | undefined;
  const late = new Promise<"late">((resolve) => {
    timer = setTimeout(() => resolve("late"), waitMs);
  });
  try {
    if ((await Promise.race([closing, late])) === "late")
      log.warn({ waitedMs: waitMs }, `${what} did not end (Redis away?); stopping without it`);
  } finally {
    clearTimeout(timer);
  }
}

/**
 * The STOP_WAIT_MS waits each role's stop makes one after another, after its grace period:
 * the worker's for its running jobs and BullMQ's close (worker.ts); the sweeper's one budget
 * for its webhook Worker, its passes and a retention pass together (sweeper-process.ts). The
 * API's stop has none.
 */
export const STOP_WAITS = { api: 0, worker: 1, sweeper: 1 } as const;

/**
 * What a stop may take besides its grace period and its waits: closing its pools and
 * connections. A Postgres pool's end is bounded at 5 s, its cancel at 1 s more
 * (own-statements.ts endCancelling); the worker's last heartbeat at 1 s; a Redis connection
 * that is not up is dropped at once (redis.ts closeRedis); the API's wait for its busy HTTP
 * connections at 3 s (api-stop.ts API_BUSY_CONNECTIONS_WAIT_MS), before its pools close.
 */
export const STOP_CLOSE_MS = 10_000;

/**
 * How long `fleet <role>` gives its stop after the signal before it exits anyway (serve.ts
 * stopWithin): past the stop's own bound — its grace period (the worker's, SHUTDOWN_GRACE_MS;
 * the others have none), each of its waits and its closes — so that a stop with Redis away
 * ends by its own path (each wait giving up with its warning, then the connections closed),
 * the deadline only catching one that hangs elsewhere.
 */
export function exitDeadlineMs(role: keyof typeof STOP_WAITS, graceMs: number): number {
  return (role === "worker" ? graceMs : 0) + STOP_WAITS[role] * STOP_WAIT_MS + STOP_CLOSE_MS;
}

/**
 * How long `fleet up` gives each child after its SIGTERM before it kills it: past every
 * role's own exit deadline, so that a child stopping slowly exits by its own stop or its own
 * deadline (which says what it waited on) rather than by SIGKILL.
 */
export function supervisorStopMs(graceMs: number, apiDrainMs = 0): number {
  const roles = Object.keys(STOP_WAITS) as (keyof typeof STOP_WAITS)[];
  const deadline = (role: keyof typeof STOP_WAITS) =>
    exitDeadlineMs(role, graceMs) + (role === "api" ? apiDrainMs : 0);
  return Math.max(...roles.map(deadline)) + 5_000;
}
