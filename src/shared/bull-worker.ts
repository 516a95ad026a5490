/**
 * BullMQ's Worker, with one addition for a stop that cannot wait for Redis: `stopLockRenewal()`.
 * BullMQ clears its lock-renewal timer, and closes the blocking connection it made for its
 * fetches, only once its `close()` gets past the jobs under way, which it never does while
 * Redis is away (taskforcesh/bullmq#4656): after `startWorker().stop()` (or the sweeper's) had
 * given up on that close, the timer went on re-arming itself and the blocking connection went
 * on reconnecting, and either kept a process that embeds the worker or the sweeper alive for
 * a minute or more (test/worker-stop-redis-away.test.ts, test/sweeper-stop-redis-away.test.ts).
 */
import type { Processor, Worker, WorkerOptions } from "bullmq";
import { bullmq } from "./cjs-packages.js";

export type BullWorker = Worker & {
  /**
   * Stops renewing the locks of this Worker's jobs and drops its blocking connection (each a
   * no-op once its close has done it): for a stop that gave up on that close.
   */
  stopLockRenewal(): Promise<void>;
};

let FleetWorker: (new (name: string, processor: Processor, opts: WorkerOptions) => BullWorker) | undefined;

/** A BullMQ Worker (its class made at the first call: BullMQ loads lazily, cjs-packages.ts). */
export function newBullWorker(name: string, processor: Processor, opts: WorkerOptions): BullWorker {
  FleetWorker ??= class extends bullmq.Worker {
    async stopLockRenewal(): Promise<void> {
      await this.lockManager.close();
      await this.backend.disconnectBlocking(false);
    }
  };
  return new FleetWorker(name, processor, opts);
}
