/**
 * What follows a committed delete (store/data-deletion.ts), outside Postgres, for the API
 * (`DELETE /v1/…`) and the sweeper (retention) alike. Each step is best effort: the rows are
 * gone already, and what is left behind does no harm — a job finds no session and does
 * nothing, a worker's next fenced write fails, stream keys expire on their own.
 *
 * - Workers running one of the sessions are told at once (the cancel channel), so a tool in
 *   progress is aborted rather than run to its end; nothing it returns can be stored. The
 *   same message names every deleted session (`deleted`): each worker removes its transcript
 *   (transcript-cleanup.ts). The runs found running are kept in Postgres with the delete
 *   (`deleted_runs`): the sweeper sends their stop again while their lease is held, should
 *   this publish be lost (Redis away: sweeper/deleted-runs.ts).
 * - The jobs of runs that had not ended are removed from the queue, and their requests
 *   waiting for an endpoint's capacity forgotten (`waitsGone`), as a cancel does.
 * - Each session's event stream gets a last event, `SESSION_DELETED` (a batch's,
 *   `BATCH_DELETED`): an open reader receives it and its stream ends; the keys expire
 *   DELETED_STREAM_TTL_MS later (a new reader is answered 404 at once, like the session).
 *   A session of a batch only marked deleted (its purge to come) gets it from its reader,
 *   which finds it gone (`endDeletedSession`), tombstone first, as here.
 * - A session's seq key becomes a tombstone (`deleted`), which the event script honours: a
 *   worker that wakes after the delete (frozen mid-model-call, or it missed the cancel)
 *   writes nothing and recreates no stream. It is kept as long as a stream would be
 *   (`tombstoneTtlMs`, FLEET_EVENTS_MAX_AGE_MS) for a session that had a run not ended — the
 *   only ones a worker may still write for — and DELETED_STREAM_TTL_MS for the others.
 */
import type { Redis } from "ioredis";
import type { FleetConfig } from "./config.js";
import { DEFAULT_RETENTION, eventStreamKey, eventsNotifyChannel, seqKey } from "./events.js";
import { QUEUES, type RunQueues } from "./queues.js";
import { isCluster } from "./redis.js";
import type { DataDeletion, Deleted, DroppedRun } from "./store/data-deletion.js";
import { keysShareSlot } from "./turn-batch.js";
import { cancelChannel } from "./worker-signals.js";

/** Sessions deleted per statement when a batch goes (and per retention chunk by default). */
export const DELETE_CHUNK = 200;

/** How long a deleted session's (or batch's) stream keeps its last event for open readers. */
export const DELETED_STREAM_TTL_MS = 60_000;

/** Counts what deletes removed (metrics.ts). */
export type DeletionCounters = {
  sessionsDeleted: { inc(labels: { trigger: "api" | "retention" }, value?: number): void };
};

export type DeletionCleanupDeps = {
  redis: Redis;
  prefix: string;
  /** Removes the queued job of a run, if any. */
  removeJob: (run: DroppedRun) => Promise<void>;
  metrics: DeletionCounters;
  /** Whether sessions' event streams exist at all (FLEET_EVENTS). */
  eventsEnabled: boolean;
  /** How long the tombstone of a session deleted with a run not ended is kept (default: a day). */
  tombstoneTtlMs?: number;
  /** Forgets the runs' requests waiting for endpoint capacity (provider-limits.ts `forget`). */
  waitsGone?: (tenant: string, runIds: string[]) => Promise<void>;
};

/** A deleted session's stream keys and how long its tombstone stays (pure). */
export function streamEnds(prefix: string, deleted: Deleted, tombstoneTtlMs: number) {
  const active = new Set(deleted.runs.map((r) => r.sessionId));
  return deleted.sessionIds.map((sessionId) => ({
    key: eventStreamKey(prefix, sessionId),
    seqKey: seqKey(prefix, sessionId),
    last: { type: "SESSION_DELETED", sessionId },
    tombstoneMs: active.has(sessionId)
      ? Math.max(tombstoneTtlMs, DELETED_STREAM_TTL_MS)
      : DELETED_STREAM_TTL_MS,
  }));
}

/** `removeJob` for a fleet's run queues: a run's job, found by its deterministic id. */
export function runJobRemover(queues: Pick<RunQueues, "getJob">): (run: DroppedRun) => Promise<void> {
  return async (run) => {
    const name = run.kind === "resume" ? "resume" : "run";
    const job = await queues.getJob(name, QUEUES.runs.jobId({ sessionId: run.sessionId, runId: run.id }));
    await job?.remove();
  };
}

/**
 * The DeletionCleanup of a role (the API, the sweeper): jobs removed from the fleet's run
 * queues, streams and tombstones as its FLEET_EVENTS settings say.
 */
export function fleetDeletionCleanup(role: {
  redis: Redis;
  config: Pick<FleetConfig, "prefix" | "events">;
  queues: Pick<RunQueues, "getJob">;
  metrics: DeletionCounters;
  waitsGone: DeletionCleanupDeps["waitsGone"];
}): DeletionCleanup {
  const { redis, config, queues, metrics, waitsGone } = role;
  return new DeletionCleanup({
    redis,
    prefix: config.prefix,
    removeJob: runJobRemover(queues),
    metrics,
    eventsEnabled: config.events.enabled,
    tombstoneTtlMs: config.events.maxAgeMs,
    waitsGone,
  });
}

export class DeletionCleanup {
  constructor(private readonly deps: DeletionCleanupDeps) {}

  /** After sessions were deleted by `trigger` (`api`, `retention`). */
  async afterSessions(deleted: Deleted, trigger: "api" | "retention"): Promise<void> {
    const { sessionIds, runs } = deleted;
    if (sessionIds.length === 0) return;
    this.deps.metrics.sessionsDeleted.inc({ trigger }, sessionIds.length);
    const running = [...new Set(runs.filter((r) => r.status === "running").map((r) => r.sessionId))];
    // Every deleted session, for what workers keep of it (transcripts, extensions' data).
    await this.deps.redis
      .publish(cancelChannel(this.deps.prefix), JSON.stringify({ sessionIds: running, deleted: sessionIds }))
      .catch(() => {});
    await this.removeJobs(runs.filter((r) => r.status !== "running"));
    await this.forgetWaits(runs);
    if (!this.deps.eventsEnabled) return;
    const ends = streamEnds(
      this.deps.prefix,
      deleted,
      this.deps.tombstoneTtlMs ?? DEFAULT_RETENTION.maxAgeMs,
    );
    const { redis } = this.deps;
    // The tombstone first (then the seq key's other fields go): from then on a late write adds nothing.
    // A cluster takes the pipeline when the prefix is a hash tag (config.ts makes it one): every
    // key is in the fleet's slot. Per session otherwise, as the keys of one session span slots.
    if (!keysShareSlot(isCluster(redis), this.deps.prefix)) {
      for (const end of ends) {
        await tombstone(redis.pipeline(), end)
          .exec()
          .catch(() => {});
        await this.endStream(end.key, [], end.last).catch(() => {});
      }
      return;
    }
    // One round trip for the chunk (a batch's 200 sessions: 6 commands each), not 1,200.
    const pipeline = redis.pipeline();
    for (const end of ends) {
      tombstone(pipeline, end);
      pipeline.xadd(end.key, "*", "type", end.last.type, "data", JSON.stringify(end.last));
      pipeline.pexpire(end.key, DELETED_STREAM_TTL_MS);
      pipeline.publish(eventsNotifyChannel(this.deps.prefix), end.key);
    }
    await pipeline.exec().catch(() => {});
  }

  /**
   * After a batch's deletion mark (store markBatchDeleted) ended its queued runs and cancelled
   * the sessions of those running: the workers running them are told at once (the cancel
   * channel, as a cancel of the batch does: a tool in progress is aborted), the queued runs'
   * jobs are removed and their requests waiting for endpoint capacity forgotten. The mark
   * recorded the running runs as a cancel does (`cancelled_runs`): should this publish be
   * lost, the sweeper sends it again until they stop (cancelled-leftovers.ts).
   */
  async afterBatchMarked(runs: DroppedRun[]): Promise<void> {
    const running = runs.filter((r) => r.status === "running");
    if (running.length > 0)
      await this.deps.redis
        .publish(
          cancelChannel(this.deps.prefix),
          JSON.stringify({ sessionIds: [...new Set(running.map((r) => r.sessionId))] }),
        )
        .catch(() => {});
    const queued = runs.filter((r) => r.status !== "running");
    await this.removeJobs(queued);
    await this.forgetWaits(queued);
  }

  /** Removes the runs' jobs, eight at a time (a failure leaves a job its worker finds ended). */
  private async removeJobs(runs: readonly DroppedRun[]): Promise<void> {
    const queued = [...runs];
    const lane = async () => {
      for (let run = queued.pop(); run; run = queued.pop()) await this.deps.removeJob(run).catch(() => {});
    };
    await Promise.all(Array.from({ length: 8 }, lane));
  }

  /**
   * Forgets the runs' requests waiting for their endpoint's capacity: such a run would keep its
   * tenant counted as waiting (a share of maxConcurrent) until maxWait after its place, for a
   * request that never comes.
   */
  private async forgetWaits(runs: readonly DroppedRun[]): Promise<void> {
    const byTenant = new Map<string, string[]>();
    for (const run of runs) byTenant.set(run.tenant, [...(byTenant.get(run.tenant) ?? []), run.id]);
    for (const [tenant, ids] of byTenant) await this.deps.waitsGone?.(tenant, ids).catch(() => {});
  }

  /**
   * After a batch was marked deleted (`DELETE /v1/batches/:id`, its readers told at once), and
   * again after its row was deleted (its sessions went before it).
   */
  async afterBatch(batchId: string): Promise<void> {
    await endBatchStream(this.deps.redis, this.deps.prefix, batchId).catch(() => {});
  }

  private async endStream(key: string, others: string[], last: { type: string } & Record<string, unknown>) {
    await endStream(this.deps.redis, this.deps.prefix, key, others, last);
  }
}

/** Makes a session's seq key its tombstone: the event script writes nothing more for it. */
function tombstone(pipeline: ReturnType<Redis["pipeline"]>, end: { seqKey: string; tombstoneMs: number }) {
  return pipeline
    .hset(end.seqKey, "deleted", "1")
    .hdel(end.seqKey, "seq", "fp", "done", "ended", "total", "floor", "started")
    .pexpire(end.seqKey, end.tombstoneMs);
}

/**
 * Tombstones a deleted session and ends its stream with SESSION_DELETED, for a reader that
 * finds its session gone with no such event yet: a session of a batch marked deleted, whose
 * purge (which writes it) comes later, chunk by chunk or by the sweeper. Whether a run of it
 * may still write is not known here: the tombstone is kept as long as one with a run (the
 * purge shortens it for a session with none).
 */
export async function endDeletedSession(
  redis: Redis,
  prefix: string,
  sessionId: string,
  tombstoneTtlMs: number,
): Promise<void> {
  const tombstoneMs = Math.max(tombstoneTtlMs, DELETED_STREAM_TTL_MS);
  await tombstone(redis.pipeline(), { seqKey: seqKey(prefix, sessionId), tombstoneMs }).exec();
  await endStream(redis, prefix, eventStreamKey(prefix, sessionId), [], {
    type: "SESSION_DELETED",
    sessionId,
  });
}

/**
 * Writes `last` to the stream (a reader may wait on one that has no entry yet), wakes its
 * readers, and lets it expire; `others` (its bookkeeping keys) go at once.
 */
async function endStream(
  redis: Redis,
  prefix: string,
  key: string,
  others: string[],
  last: { type: string } & Record<string, unknown>,
): Promise<void> {
  await redis.xadd(key, "*", "type", last.type, "data", JSON.stringify(last));
  await redis.pexpire(key, DELETED_STREAM_TTL_MS);
  await redis.publish(eventsNotifyChannel(prefix), key);
  for (const other of others) await redis.del(other);
}

/**
 * Ends a deleted batch's event stream with `BATCH_DELETED` (its readers stop there) and drops
 * its bookkeeping: by the delete, and by a reader that finds its batch deleted with no such
 * event yet (the delete's writer stopped first; retention writes it only once purged).
 */
export function endBatchStream(redis: Redis, prefix: string, batchId: string): Promise<void> {
  return endStream(
    redis,
    prefix,
    `${prefix}:batch-events:${batchId}`,
    [`${prefix}:batch-events-done:${batchId}`, `${prefix}:batch-events-fp:${batchId}`],
    { type: "BATCH_DELETED", batchId },
  );
}

/**
 * Deletes the sessions of a batch marked deleted, a chunk per statement, then its row; stops
 * after `budgetMs` (the rest is left for a later call). Used by the API and the sweeper.
 */
export async function purgeBatch(
  deps: {
    store: Pick<DataDeletion, "purgeBatchChunk">;
    cleanup: DeletionCleanup;
    chunk?: number;
  },
  batchId: string,
  budgetMs: number,
  trigger: "api" | "retention" = "api",
  signal?: AbortSignal,
): Promise<{ sessionsDeleted: number; complete: boolean }> {
  const until = Date.now() + budgetMs;
  let sessionsDeleted = 0;
  for (;;) {
    const chunk = await deps.store.purgeBatchChunk(batchId, deps.chunk ?? DELETE_CHUNK);
    sessionsDeleted += chunk.sessionIds.length;
    await deps.cleanup.afterSessions(chunk, trigger);
    if (chunk.done) {
      await deps.cleanup.afterBatch(batchId);
      return { sessionsDeleted, complete: true };
    }
    if (Date.now() >= until || signal?.aborted) return { sessionsDeleted, complete: false };
    // Every session left is held by another transaction for now (a worker's claim): wait a little.
    if (chunk.sessionIds.length === 0) await new Promise((resolve) => setTimeout(resolve, 50));
  }
}
