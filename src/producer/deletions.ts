/**
 * `DELETE /v1/sessions/:id` and `DELETE /v1/batches/:id`: a user's data erased on request.
 *
 * - A session is deleted with its messages and runs, whatever its state (its row locked
 *   first, so that a run started while the delete waited is seen running).
 *   A queued run's job is removed; a worker running it is told to stop at once, and its next
 *   write is refused by the fence (the row is gone), so it stores nothing, starts no further
 *   tool, resumes and parks nothing. Its event stream ends with `SESSION_DELETED`.
 * - A batch is first marked deleted (from then on it answers 404, takes no session, owes no
 *   webhook; its active sessions are cancelled and take no new message, a tool running for one
 *   is aborted; its event stream ends
 *   with `BATCH_DELETED`), then its sessions are deleted DELETE_CHUNK at a time, each chunk a statement
 *   of its own, then its row. A deletion the API could not finish (it stopped, or rows stayed
 *   locked past BATCH_DELETE_BUDGET_MS) is finished by the sweeper.
 *
 * Another tenant's id answers 404, exactly like an id that does not exist.
 */
import { type DeletionCleanup, purgeBatch } from "../shared/deletion-cleanup.js";
import { NotFoundError } from "../shared/errors.js";
import type { DataDeletion } from "../shared/store/data-deletion.js";
import { BATCH_DELETE_BUDGET_MS } from "../shared/store/deleted-batches.js";

export type SessionDeleted = { id: string; deleted: true };
export type BatchDeleted = {
  id: string;
  deleted: true;
  /** Sessions this request deleted. */
  sessionsDeleted: number;
  /** False when the sweeper finishes deleting the batch's sessions (the batch answers 404 already). */
  complete: boolean;
};

export class Deletions {
  constructor(
    private readonly deps: {
      store: Pick<DataDeletion, "deleteSession" | "markBatchDeleted" | "purgeBatchChunk">;
      cleanup: DeletionCleanup;
      chunk?: number;
      budgetMs?: number;
      /** Told when the sessions of a batch already marked deleted could not be deleted now. */
      onPurgeError?: (error: unknown, batchId: string) => void;
      /**
       * Told after a delete ended queued runs of `tenant`: a tenant left with nothing waiting
       * starts over in the fair order (cancel-cleanup.ts `startOverIfIdle`), as after a cancel.
       * Without it, a tenant that deleted its batch of 30 queued sessions had its next session
       * queued behind another tenant's 30 waiting runs, for the runs it no longer had
       * (test/fair-dispatch-deletion.test.ts).
       */
      startOver?: (tenant: string) => Promise<void>;
    },
  ) {}

  async deleteSession(tenant: string, id: string): Promise<SessionDeleted> {
    const deleted = await this.deps.store.deleteSession(tenant, id);
    if (!deleted) throw new NotFoundError(`session ${id}`);
    await this.deps.cleanup.afterSessions(deleted, "api");
    if (deleted.runs.some((run) => run.status === "queued")) await this.startOver(tenant);
    return { id, deleted: true };
  }

  async deleteBatch(tenant: string, id: string): Promise<BatchDeleted> {
    const dropped = await this.deps.store.markBatchDeleted(tenant, id);
    if (!dropped) throw new NotFoundError(`batch ${id}`);
    // The queued runs the mark ended: their jobs go now (the chunks list only runs not ended);
    // the workers of those running are told now, not when their chunk is purged.
    await this.deps.cleanup.afterBatchMarked(dropped);
    if (dropped.some((run) => run.status === "queued")) await this.startOver(tenant);
    // Its event stream's readers are told now, not once the purge ends (20 s, or the sweeper).
    await this.deps.cleanup.afterBatch(id);
    const budgetMs = this.deps.budgetMs ?? BATCH_DELETE_BUDGET_MS;
    // The mark has committed: the batch is deleted for its caller, and what is left of it is
    // the sweeper's. A failure from here on (Postgres lost mid-way) is answered as a deletion
    // not finished, not with a 5xx: that said nothing was done, released the request's
    // Idempotency-Key, and its retry was answered 404.
    let sessionsDeleted = 0;
    const store = {
      purgeBatchChunk: async (batchId: string, limit: number) => {
        const chunk = await this.deps.store.purgeBatchChunk(batchId, limit);
        sessionsDeleted += chunk.sessionIds.length;
        return chunk;
      },
    };
    try {
      const { complete } = await purgeBatch({ ...this.deps, store }, id, budgetMs, "api");
      return { id, deleted: true, sessionsDeleted, complete };
    } catch (error) {
      this.deps.onPurgeError?.(error, id);
      return { id, deleted: true, sessionsDeleted, complete: false };
    }
  }

  /** Best effort, as after a cancel: a failure only leaves the fair order as it was. */
  private async startOver(tenant: string): Promise<void> {
    await this.deps.startOver?.(tenant).catch(() => {});
  }
}
