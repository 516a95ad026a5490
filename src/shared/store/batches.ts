/**
 * Batches (contracts §9): their counts, results and cancellation, all computed from the
 * state of their sessions and runs — no counter is kept, so nothing drifts when workers
 * crash, sessions are resumed or a run is retried: a session counts once, by where it
 * stands now.
 *
 * A session of a batch is
 * - `cancelled` / `parked`: its status says so;
 * - `running`: a run of it is running — or none is queued or running but its history is
 *   interrupted, so the sweeper resumes it (or parks it) next;
 * - `queued`: a run of it waits and none runs;
 * - `completed`: nothing waits, and its history ends in a completed answer (or it was given
 *   no input and nothing ever ran).
 * The batch has ended when no session is queued or running (and it is not open).
 *
 * Results and ended sessions are read a page at a time in batch-results.ts, cancels are
 * batch-cancel.ts, its webhook's delivery state batch-webhook-rows.ts; BatchStore is the one
 * entry point.
 */

import type { BatchCounts, BatchJson, BatchResult } from "../api-types.js";
import type { UsageTotals } from "../prices.js";
import { batchBusy } from "./batch-busy.js";
import { cancelSessions, type DroppedRun, type RunningRun } from "./batch-cancel.js";
import { countsOf, type Sql } from "./batch-counts.js";
import { type EndedSession, iso, readEndedPage, readResultsPage } from "./batch-results.js";
import { BatchWebhookRows } from "./batch-webhook-rows.js";
import { json } from "./rows.js";
import type { ListCursor } from "./session-queries.js";
import { usageOfBatch } from "./session-usage.js";
import { SharedNextReads } from "./shared-next-reads.js";

export type { DroppedRun, RunningRun } from "./batch-cancel.js";
export type { EndedSession } from "./batch-results.js";
export type { BatchCounts, BatchJson, BatchResult };

type BatchRaw = {
  id: string;
  tenant: string;
  webhook_url: string | null;
  open: boolean;
  session_events: boolean;
  created_at: string;
  ended_at: string | null;
  cancelled_at: string | null;
  webhook_delivered_at: string | null;
  webhook_failed_at: string | null;
  webhook_last_error: string | null;
};

export type Unsettled = {
  id: string;
  tenant: string;
  ended: boolean;
  webhookOwed: boolean;
} & UnsettledCursor;
export { WEBHOOK_RANK_CAP } from "./batch-webhook-rows.js";
/** Where a page of `unsettled` ends: its last row (`createdAt` as Postgres wrote it, to the microsecond). */
export type UnsettledCursor = { createdAt: string; id: string };

export class BatchStore extends BatchWebhookRows {
  /** The views being read, by tenant and batch: concurrent polls of one batch share the next read. */
  private readonly views = new SharedNextReads<BatchJson | undefined>();

  /** The batch's sessions' usage and cost summed (one aggregate over their model steps). */
  usage(id: string): Promise<UsageTotals> {
    return usageOfBatch(this.database, id);
  }

  private async row(
    id: string,
    tenant?: string,
    sql: Sql = this.database.sql,
  ): Promise<BatchRaw | undefined> {
    const [row] = await sql<{ b: string | BatchRaw }[]>`
      select row_to_json(b) as b from batches b
       where b.id = ${id} and b.deleted_at is null ${tenant === undefined ? sql`` : sql`and b.tenant = ${tenant}`}`;
    return row ? json<BatchRaw>(row.b) : undefined;
  }

  /** Whether the batch is there: neither deleted nor marked deleted (a results read's pages). */
  async present(id: string): Promise<boolean> {
    return (await this.row(id)) !== undefined;
  }

  /** Counts by current state: one pass over the batch's sessions and its unfinished runs. */
  counts(id: string): Promise<BatchCounts> {
    return countsOf(this.database.sql, id);
  }

  /**
   * Whether every session of the batch is terminal: a look at what may still move
   * (batch-busy.ts), on its indexes. Sequential scans are off for it: with statistics taken
   * while the batch ran (most of its runs unfinished, in a fleet that has little else), the
   * planner expects its first unfinished run within a few rows of a table scan, and at the
   * end, with none left, that scan read every run and session of the fleet at each look.
   */
  async hasEnded(id: string): Promise<boolean> {
    const [, [row]] = await this.database.sql.begin((tx) => [
      tx`set local enable_seqscan = off`,
      tx<{ busy: boolean }[]>`select ${batchBusy(tx, tx`${id}`)} as busy`,
    ]);
    return !row!.busy;
  }

  /**
   * Which of these batches have ended, as `hasEnded` asks of each, in one transaction for
   * all (the sweeper's page of unsettled batches; one snapshot answers for every one of them).
   */
  async endedAmong(ids: readonly string[]): Promise<Set<string>> {
    if (ids.length === 0) return new Set();
    const [, rows] = await this.database.sql.begin((tx) => [
      tx`set local enable_seqscan = off`,
      tx<{ id: string }[]>`
        select b.id from jsonb_array_elements_text(${JSON.stringify(ids)}::jsonb) as b(id)
         where not ${batchBusy(tx, tx`b.id`)}`,
    ]);
    return new Set(rows.map((row) => row.id));
  }

  /**
   * The batch as `GET /v1/batches/:id` answers it, or undefined (missing or another
   * tenant's). A batch seen ended for the first time gets its `ended_at` here (the sweeper
   * does the same and queues the webhook).
   */
  view(id: string, tenant?: string): Promise<BatchJson | undefined> {
    // A view counts every session of the batch (0.3–0.6 s of Postgres at 20,000): the polls
    // of one batch that arrive while it is read share the next read, begun after they asked
    // (shared-next-reads.ts; test/batch-view-shared-reads.test.ts).
    return this.views.read(JSON.stringify([tenant ?? null, id]), () => this.readView(id, tenant));
  }

  private async readView(id: string, tenant?: string): Promise<BatchJson | undefined> {
    // The row and the counts in one snapshot: a cancel committed between two reads was in the
    // counts (every session terminal) but not in the row, and the batch read `ended`, not
    // `cancelled` (test/batch-view-cancel-race.test.ts).
    const read = await this.database.sql.begin("isolation level repeatable read read only", async (tx) => {
      const row = await this.row(id, tenant, tx);
      return row ? { row, counts: await countsOf(tx, id) } : undefined;
    });
    if (!read) return undefined;
    const { row, counts } = read;
    const ended = !row.open && counts.queued === 0 && counts.running === 0;
    let endedAt = row.ended_at;
    if (ended && endedAt === null) endedAt = await this.markEnded(id);
    return {
      id: row.id,
      status: !ended ? "running" : row.cancelled_at !== null ? "cancelled" : "ended",
      counts,
      createdAt: iso(row.created_at)!,
      ...(ended && endedAt !== null ? { endedAt: iso(endedAt) } : {}),
      ...(row.cancelled_at !== null ? { cancelledAt: iso(row.cancelled_at) } : {}),
      open: row.open,
      ...(row.session_events ? {} : { sessionEvents: false as const }),
      ...(row.webhook_url !== null
        ? {
            webhook: {
              url: row.webhook_url,
              deliveredAt: iso(row.webhook_delivered_at) ?? null,
              ...(row.webhook_failed_at !== null ? { failedAt: iso(row.webhook_failed_at)! } : {}),
              ...(row.webhook_last_error !== null ? { lastError: row.webhook_last_error } : {}),
            },
          }
        : {}),
    };
  }

  /** Records that the batch ended (once); returns when. */
  async markEnded(id: string): Promise<string> {
    const [row] = await this.database.sql<{ ended_at: string }[]>`
      update batches set ended_at = coalesce(ended_at, now()) where id = ${id} returning ended_at`;
    return row!.ended_at;
  }

  /** One page of results in session-id order after `after`, at most `maxBytes` of outputs (batch-results.ts). */
  resultsPage(
    id: string,
    after: string,
    limit: number,
    maxBytes = Number.MAX_SAFE_INTEGER,
  ): Promise<(BatchResult & { id: string })[]> {
    return readResultsPage(this.database, id, after, limit, maxBytes);
  }

  /** Postgres's clock: what batch events compare `updated_at` with (not this host's clock). */
  async clock(): Promise<Date> {
    const [row] = await this.database.sql<{ t: string | Date }[]>`select now() as t`;
    return new Date(row!.t);
  }

  /** One page of the batch's sessions with those in a terminal state (batch-results.ts). */
  endedPage(
    id: string,
    after: ListCursor | null,
    limit: number,
    since?: Date,
  ): Promise<{ next: ListCursor | null; ended: EndedSession[] }> {
    return readEndedPage(this.database, id, after, limit, since);
  }

  /** Cancels a session, or every session of a batch, and their queued runs (batch-cancel.ts). */
  cancel(
    tenant: string,
    target: { sessionId: string } | { batchId: string },
  ): Promise<{ sessionIds: string[]; dropped: DroppedRun[]; running: RunningRun[] }> {
    return cancelSessions(this.database, tenant, target);
  }

  /**
   * Batches not yet seen ended, or whose webhook is owed: one page of the sweeper's scan,
   * oldest first, after `after` (the last row of the page before; none: from the start).
   */
  unsettled(limit = 500, after?: UnsettledCursor): Promise<Unsettled[]> {
    const { sql } = this.database;
    return sql<Unsettled[]>`
      select id, tenant, ended_at is not null as ended,
             (webhook_url is not null and webhook_delivered_at is null and webhook_failed_at is null) as "webhookOwed",
             created_at::text as "createdAt"
        from batches
       where deleted_at is null and ((ended_at is null and not open)
          or (ended_at is not null and webhook_url is not null and webhook_delivered_at is null
              and webhook_failed_at is null))
         ${after ? sql`and (created_at, id) > (${after.createdAt}::timestamptz, ${after.id})` : sql``}
       order by created_at, id limit ${limit}`;
  }

  /** The batch's `ended_at` (ISO), or null: not ended, or no such batch (batch-stream-check.ts). */
  async endedAt(id: string): Promise<string | null> {
    const [row] = await this.database.sql<{ ended_at: string | Date | null }[]>`
      select ended_at from batches where id = ${id}`;
    return iso(row?.ended_at ?? null) ?? null;
  }

  /**
   * Which of these (session, run) pairs name a run that Postgres does not have while it has the
   * session (a session deleted since took its runs with it): the run ids (batch-stream-check.ts).
   */
  async missingRuns(pairs: readonly [sessionId: string, runId: string][]): Promise<Set<string>> {
    const rows = await this.database.sql<{ r: string }[]>`
      select u.r from json_to_recordset(${JSON.stringify(pairs.map(([s, r]) => ({ s, r })))}::json) as u(s text, r text)
       where exists (select 1 from sessions s where s.id = u.s)
         and not exists (select 1 from runs r where r.id = u.r)`;
    return new Set(rows.map((row) => row.r));
  }
}
