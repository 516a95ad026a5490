/**
 * The sweeper's retention pass (FLEET_RETENTION_DAYS) and the end of batch deletions the API
 * left unfinished. Work is done in chunks (FLEET_RETENTION_CHUNK sessions per chunk, each
 * chunk its own short transaction, at most MAX_CHUNKS_PER_PASS per pass), so no transaction is
 * large and the worker's statements never wait long behind one. Rows are taken with
 * `for update … skip locked`: several sweepers share the work without deleting anything twice
 * or waiting on each other, and a row a worker holds is left for a later pass.
 */
import type { Logger } from "pino";
import { type DeletionCleanup, purgeBatch } from "../shared/deletion-cleanup.js";
import type { FleetMetrics } from "../shared/metrics.js";
import type { DataDeletion } from "../shared/store/data-deletion.js";
import { BATCH_DELETE_HANDOVER_MS } from "../shared/store/deleted-batches.js";

/** Chunks of sessions one pass deletes at most; the rest waits for the next pass. */
export const MAX_CHUNKS_PER_PASS = 20;
/** Batches one pass marks deleted (by retention) or finishes deleting at most. */
const BATCHES_PER_PASS = 20;
/** Time one pass spends on one batch's sessions at most. */
const BATCH_BUDGET_MS = 5_000;

export type RetentionSettings = { maxIdleMs: number | null; chunk: number };

export type RetentionDeps = {
  store: Pick<
    DataDeletion,
    "expireSessions" | "expireBatches" | "unfinishedBatchDeletes" | "purgeBatchChunk"
  >;
  cleanup: DeletionCleanup;
  settings: RetentionSettings;
  log: Pick<Logger, "info" | "warn">;
  metrics?: Pick<FleetMetrics, "retentionPasses">;
};

/** `moreLeft`: the pass stopped at one of its limits with work still to do. */
export type PassResult = { sessionsDeleted: number; batchesDeleted: number; moreLeft: boolean };

export class Retention {
  constructor(private readonly deps: RetentionDeps) {}

  /** One pass: expired sessions, expired batches, then every batch marked deleted. */
  async pass(signal?: AbortSignal): Promise<PassResult> {
    const { store, cleanup, settings } = this.deps;
    let sessionsDeleted = 0;
    let batchesDeleted = 0;
    let moreLeft = false;
    let expired: string[] = [];
    if (settings.maxIdleMs !== null) {
      moreLeft = true; // until a chunk comes back short
      for (let i = 0; i < MAX_CHUNKS_PER_PASS && !signal?.aborted; i++) {
        const chunk = await store.expireSessions(settings.maxIdleMs, settings.chunk);
        sessionsDeleted += chunk.sessionIds.length;
        await cleanup.afterSessions(chunk, "retention");
        if (chunk.sessionIds.length < settings.chunk) {
          moreLeft = false;
          break;
        }
      }
      expired = await store.expireBatches(settings.maxIdleMs, BATCHES_PER_PASS);
      if (expired.length === BATCHES_PER_PASS) moreLeft = true;
    }
    // The batches this pass marked, then those whose deletion was left unfinished: a batch
    // marked by a DELETE still under way is that request's to purge (BATCH_DELETE_HANDOVER_MS).
    const unfinished = await store.unfinishedBatchDeletes(BATCHES_PER_PASS, BATCH_DELETE_HANDOVER_MS);
    if (unfinished.length === BATCHES_PER_PASS) moreLeft = true;
    for (const batchId of new Set([...expired, ...unfinished])) {
      if (signal?.aborted) break;
      const purged = await purgeBatch(
        { store, cleanup, chunk: settings.chunk },
        batchId,
        BATCH_BUDGET_MS,
        "retention",
        signal,
      );
      sessionsDeleted += purged.sessionsDeleted;
      if (purged.complete) batchesDeleted++;
      else moreLeft = true;
    }
    if (signal?.aborted) return { sessionsDeleted, batchesDeleted, moreLeft: true };
    this.deps.metrics?.retentionPasses.inc({ result: moreLeft ? "more_left" : "caught_up" });
    if (sessionsDeleted > 0 || batchesDeleted > 0)
      this.deps.log.info({ sessionsDeleted, batchesDeleted }, "retention: deleted sessions and batches");
    return { sessionsDeleted, batchesDeleted, moreLeft };
  }
}

/**
 * Runs `retention` every `intervalMs` (at least 50), never two passes at once, on a timer of
 * its own so that a long pass never delays the liveness checks; `halt` aborts a pass under way.
 * `running()`: the pass under way (or none), for a stop to wait for.
 */
export function retainOnTimer(
  retention: Pick<Retention, "pass">,
  intervalMs: number,
  halt: AbortSignal,
  log: Pick<Logger, "warn">,
): { stop: () => void; running: () => Promise<void> } {
  let retaining: Promise<void> | null = null;
  const tick = () => {
    if (retaining) return;
    retaining = retention
      .pass(halt)
      .then(
        () => {},
        (error: unknown) => {
          if (!halt.aborted) log.warn({ err: error }, "retention pass failed; tried again at the next");
        },
      )
      .finally(() => {
        retaining = null;
      });
  };
  const timer = setInterval(tick, Math.max(50, intervalMs));
  return { stop: () => clearInterval(timer), running: () => retaining ?? Promise.resolve() };
}
