/**
 * What one reader of `GET /v1/batches/:id/events` derives from Postgres before each look at
 * the batch's stream (contracts §7, event-stream.ts): a `SESSION_ENDED` per session that
 * reached a terminal state, then one `BATCH_COMPLETED`. Each is written once whoever writes
 * it (the stream's script, batch-event-append.ts, keeps a set of what was written), so passes
 * may overlap freely.
 *
 * A reader looks every second and at every wake, and a batch of 100,000 sessions cannot be
 * read whole each time: that kept Postgres busy for as long as anyone watched. So:
 * - the first pass, and one every FULL_PASS_MS, reads every session of the batch (ids and
 *   states only, never outputs or usage);
 * - the passes between read only the sessions whose row changed since the previous pass
 *   began (an index range in `updated_at` order), on Postgres's clock, less OVERLAP_MS (every change that ends a session — a run's
 *   end, a parking, a cancel, the sweeper's — sets `updated_at`; the overlap covers a
 *   transaction that began before that pass and committed after it, and the full pass any
 *   longer one);
 * - whether the batch has ended is the cheap `hasEnded` check; its counts are read once, for
 *   the `BATCH_COMPLETED` that follows, and never again by this reader once written.
 * "A batch seen ended has every session terminal in the pages read after": the end is
 * checked before the pages are read, and the pass that sees it reads the whole batch, so
 * every SESSION_ENDED is written before the BATCH_COMPLETED.
 */
import type { BatchJson, BatchStore, EndedSession } from "../shared/store/batches.js";
import type { ListCursor } from "../shared/store/session-queries.js";
import { BATCH_MEMBER, sessionFingerprint } from "./batch-stream-check.js";

export const FULL_PASS_MS = 30_000;
export const OVERLAP_MS = 5_000;
const PAGE = 1_000;

/** `fp`: what Postgres had when the event was derived (batch-stream-check.ts); absent: not known. */
export type BatchEventWrite = (
  entries: [member: string, type: string, data: unknown, fp?: string][],
) => Promise<void>;

export type BatchEventSyncDeps = {
  batches: Pick<BatchStore, "clock" | "hasEnded" | "endedPage" | "view">;
  write: BatchEventWrite;
  /**
   * Drops the stream when Postgres contradicts what it holds (a restore from backup,
   * batch-stream-check.ts); asked before the first pass writes anything. Absent: never.
   */
  dropIfStale?: () => Promise<boolean>;
  /** This host's monotonic-enough clock, for when the next full pass is due. */
  now?: () => number;
};

export class BatchEventSync {
  /** Where the next incremental pass starts (Postgres's clock); null: a full pass is next. */
  private since: Date | null = null;
  private fullAt = 0;
  private completedWritten = false;

  constructor(
    private readonly deps: BatchEventSyncDeps,
    readonly batchId: string,
    readonly tenant: string,
  ) {}

  /** One pass: the events Postgres shows and the stream may lack. */
  async sync(): Promise<void> {
    const { batches, write } = this.deps;
    const now = this.deps.now ?? Date.now;
    if (this.since === null && this.deps.dropIfStale) await this.deps.dropIfStale();
    const began = await batches.clock();
    // The batch's end (and its counts), seen before the pages are read.
    let completed: BatchJson | undefined;
    if (!this.completedWritten && (await batches.hasEnded(this.batchId))) {
      const view = await batches.view(this.batchId);
      if (view && view.status !== "running") completed = view;
    }
    // The pass that writes BATCH_COMPLETED reads the whole batch: an incremental one misses a
    // session whose end committed in a transaction older than the overlap, and its
    // SESSION_ENDED came at the next full pass, after the BATCH_COMPLETED a reader stops at.
    const full = this.since === null || completed !== undefined || now() - this.fullAt >= FULL_PASS_MS;
    let after: ListCursor | null = null;
    do {
      const page = await batches.endedPage(this.batchId, after, PAGE, full ? undefined : this.since!);
      await write(page.ended.map((session) => sessionEnded(this.batchId, session)));
      after = page.next;
    } while (after !== null);
    this.since = new Date(began.getTime() - OVERLAP_MS);
    if (full) this.fullAt = now();
    if (!completed) return;
    await write([[BATCH_MEMBER, "BATCH_COMPLETED", batchCompleted(completed), completed.endedAt ?? ""]]);
    this.completedWritten = true;
  }
}

function sessionEnded(batchId: string, session: EndedSession): [string, string, unknown, string?] {
  const entry: [string, string, unknown, string?] = [
    session.id,
    "SESSION_ENDED",
    {
      type: "SESSION_ENDED",
      batchId,
      sessionId: session.id,
      customId: session.customId,
      status: session.status,
      ...(session.parkedReason ? { parkedReason: session.parkedReason } : {}),
    },
  ];
  if (session.lastRun !== undefined) entry.push(sessionFingerprint(session.lastRun));
  return entry;
}

function batchCompleted(view: BatchJson) {
  return { type: "BATCH_COMPLETED", batchId: view.id, status: view.status, counts: view.counts };
}
