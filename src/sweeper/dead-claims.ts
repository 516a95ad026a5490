/**
 * Part 4 of a sweep (sweeper.ts): jobs a worker claimed but died before starting, enqueued
 * again under a new deterministic id.
 */
import { ownerOf } from "../shared/lease.js";
import { type JobName, parseRunJob, type RunJob } from "../shared/queues.js";
import type { DeathWatch } from "./liveness.js";
import type { SessionFailures } from "./session-failures.js";
import type { SweeperDeps } from "./sweeper-deps.js";

export class DeadClaims {
  private lastLive: Set<string> | null = null;

  constructor(
    private readonly deps: Pick<SweeperDeps, "queues" | "queries" | "lease" | "resumes" | "log" | "signal">,
    /** The workers named by active jobs, a death confirmed in two looks. */
    private readonly deaths: DeathWatch,
    private readonly now: () => number,
    private readonly failures: Pick<SessionFailures, "guarded">,
    /** Runs `fn` under the session's sweep lock (sweep-locks.ts); undefined when another sweeper holds it. */
    private readonly withLock: <T>(sessionId: string, fn: () => Promise<T>) => Promise<T | undefined>,
  ) {}

  private get stopping(): boolean {
    return this.deps.signal?.aborted === true;
  }

  /** Forget liveness observations (the sweeper's `resetLiveness`). */
  reset(): void {
    this.deaths.reset();
  }

  /**
   * Part 4: jobs a worker claimed but died before starting (their run is still queued, so
   * part 1 cannot see them). BullMQ would bring them back only at its stalled check; the
   * job's `processedBy` names the worker, whose liveness we know within milliseconds. The
   * run is enqueued again under a new deterministic id; the stale job, if BullMQ ever
   * hands it out again, finds the run taken and does nothing.
   */
  async sweep(liveNow: Set<string>): Promise<number> {
    // Cheap when nobody died: active jobs are read only while a worker is missing.
    const someoneLeft = this.lastLive === null || [...this.lastLive].some((id) => !liveNow.has(id));
    this.lastLive = liveNow;
    if (!someoneLeft && !this.deaths.pending()) return 0;
    const active = await this.deps.queues.getActive();
    const owners = active.flatMap((job) => (job.processedBy ? [job.processedBy] : []));
    if (owners.length === 0) return 0;
    const dead = this.deaths.observe(liveNow, owners, this.now());
    if (dead.size === 0) return 0;
    let count = 0;
    for (const job of active) {
      if (this.stopping) break;
      const owner = job.processedBy;
      if (!owner || !dead.has(owner)) continue;
      let payload: RunJob;
      let name: JobName;
      try {
        ({ name, payload } = parseRunJob(job.name, job.data));
      } catch {
        continue; // a malformed job fails on its own; nothing to recover
      }
      const done = await this.failures.guarded(payload.sessionId, () =>
        this.withLock(payload.sessionId, async () => {
          const run = await this.deps.queries.getRun(payload.runId);
          if (run?.status !== "queued") return false;
          const holder = await this.deps.lease.holder(payload.sessionId);
          if (holder !== null && ownerOf(holder) === owner)
            await this.deps.lease.release(payload.sessionId, holder);
          // The stale job stays `active` until BullMQ's stalled check: count it once.
          const retryId = `${job.id}-after-${owner}`;
          if (await this.deps.queues.getJob(name, retryId)) return false;
          const counted = await this.deps.resumes.countRetry(payload.sessionId, payload.runId, retryId);
          if (counted.action !== "retry") return false;
          await this.deps.queues.enqueue(name, payload, { jobId: retryId, delayMs: counted.delayMs });
          this.deps.log.info(
            { runId: payload.runId, workerId: owner },
            "run claimed by a dead worker re-enqueued",
          );
          return true;
        }),
      );
      if (done) count++;
    }
    return count;
  }
}
