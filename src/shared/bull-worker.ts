/**
 * BullMQ's Worker, with one addition for a stop that cannot wait for Redis: `stopKeepingAlive()`.
 * BullMQ stops its lock renewal, and closes the blocking connection it made for its fetches,
 * only once its `close()` gets past the jobs under way, which it never does while Redis is
 * away (taskforcesh/bullmq#4656). After `startWorker().stop()` or `startSweeper().stop()` had
 * given up on that close, the renewal timer went on re-arming itself, and a blocking
 * connection that had not connected before Redis went on reconnecting: either kept a program
 * that embeds the worker or the sweeper alive for a minute or more
 * (test/worker-stop-redis-away.test.ts, test/sweeper-stop-redis-away.test.ts).
 */
import type { Processor, Worker, WorkerOptions } from "bullmq";
import { bullmq } from "./cjs-packages.js";

export type BullWorker = Worker & {
  /**
   * Stops what this Worker's close would have stopped and what would keep the process alive:
   * the renewal of its jobs' locks, and its blocking connection (closed at once, as BullMQ's
   * forced close does, whether or not it ever connected). Waits for no Redis and for nothing
   * of the close under way; a no-op once that close has ended. For a stop that gave up on it.
   */
  stopKeepingAlive(): Promise<void>;
};

let FleetWorker: (new (name: string, processor: Processor, opts: WorkerOptions) => BullWorker) | undefined;

/** A BullMQ Worker (its class made at the first call: BullMQ loads lazily, cjs-packages.ts). */
export function newBullWorker(name: string, processor: Processor, opts: WorkerOptions): BullWorker {
  FleetWorker ??= class extends bullmq.Worker {
    async stopKeepingAlive(): Promise<void> {
      await this.lockManager.close();
      // BullMQ's forced close: drops the blocking connection without waiting for Redis, or for
      // its first connect when it never connected. Not awaited: had the Worker's own close
      // begun closing its connections, this returns that close, which may wait on Redis. The
      // main connection is the caller's (shared: left open, for the caller to close).
      this.backend.close(true).catch(() => {});
    }
  };
  return new FleetWorker(name, processor, opts);
}
