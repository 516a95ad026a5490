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
 * How long a stop waits for each thing that may never end while Redis is away before it goes
 * on and closes the connections (which fails the commands still waiting): BullMQ's
 * `Worker.close()` never resolves while its Redis is away (taskforcesh/bullmq#4656), nor does
 * a pass or a job's last write waiting on a Redis command, and a stop must not wait for Redis
 * to come back. Used by the sweeper's and the worker's stop.
 */
export const STOP_WAIT_MS = 11_000;

/** Waits for `closing` at most STOP_WAIT_MS; then the stop goes on without it, with a warning. */
export async function closeWithin(
  closing: Promise<unknown>,
  what: string,
  log: Pick<Logger, "warn">,
): Promise<void> {
  let timer: NodeJS.Timeout | undefined;
  const late = new Promise<"late">((resolve) => {
    timer = setTimeout(() => resolve("late"), STOP_WAIT_MS);
  });
  try {
    if ((await Promise.race([closing, late])) === "late")
      log.warn({ waitedMs: STOP_WAIT_MS }, `${what} did not end (Redis away?); stopping without it`);
  } finally {
    clearTimeout(timer);
  }
}
