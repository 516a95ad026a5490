/**
 * BullMQ's Worker, with one addition for a stop that cannot wait for Redis: `stopLockRenewal()`.
 * BullMQ clears its lock-renewal timer only once its `close()` gets past the jobs under way,
 * which it never does while Redis is away (taskforcesh/bullmq#4656): after `startWorker().stop()`
 * had given up on that close, the timer went on re-arming itself and kept a process that
 * embeds the worker alive for one to two minutes more (test/worker-stop-redis-away.test.ts).
 */
import type { Processor, Worker, WorkerOptions } from "bullmq";
import { bullmq } from "../shared/cjs-packages.js";

export type BullWorker = Worker & {
  /** Stops renewing the locks of this Worker's jobs (a no-op once its close has done it). */
  stopLockRenewal(): Promise<void>;
};

let FleetWorker: (new (name: string, processor: Processor, opts: WorkerOptions) => BullWorker) | undefined;

/** A BullMQ Worker (its class made at the first call: BullMQ loads lazily, cjs-packages.ts). */
export function newBullWorker(name: string, processor: Processor, opts: WorkerOptions): BullWorker {
  FleetWorker ??= class extends bullmq.Worker {
    stopLockRenewal(): Promise<void> {
      return this.lockManager.close();
    }
  };
  return new FleetWorker(name, processor, opts);
}
