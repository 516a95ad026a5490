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
 */

import type { BatchCounts, BatchJson, BatchResult } from "../api-types.js";
import type { Database } from "../db/client.js";
import type { UsageTotals } from "../prices.js";
import { batchBusy } from "./batch-busy.js";
import { json } from "./rows.js";
import type { ListCursor } from "./session-queries.js";
import { totalsOfRow, USAGE_SUMS, usageOfBatch } from "./session-usage.js";

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
};

export type Unsettled = {
  id: string;
  tenant: string;
  ended: boolean;
  webhookOwed: boolean;
} & UnsettledCursor;
/** Older owed webhooks of its tenant a delivery's priority counts at most (`webhookPriority`). */
export const WEBHOOK_RANK_CAP = 1_000;
/** Where a page of `unsettled` ends: its last row (`createdAt` as Postgres wrote it, to the microsecond). */
export type UnsettledCursor = { createdAt: string; id: string };

const iso = (value: string | Date | null): string | undefined =>
  value === null ? undefined : new Date(value).toISOString();

/** A session of a batch in a terminal state, as `SESSION_ENDED` names it. */
export type EndedSession = {
  id: string;
  customId: string | null;
  status: "completed" | "parked" | "cancelled";
  parkedReason?: string;
  /** The id of the session's latest run (null: none), its end's fingerprint (batch-stream-check.ts). */
  lastRun?: string | null;
};

/** A session's state as batch results and counts name it, from its row and its unfinished runs. */
function resultStatus(r: {
  status: string;
  running: boolean | null;
  run_started: boolean;
  tail_state: string;
}): BatchResult["status"] {
  if (r.status === "cancelled" || r.status === "parked") return r.status;
  if (r.running === true) return "running";
  if (r.running === false) return "queued";
  return r.run_started && r.tail_state !== "completed" ? "running" : "completed";
}

/**
 * A queued run a cancel ended. `handedBack`: it had started and was waiting for its
 * endpoint's capacity (contracts §15), so its request is still counted there as waiting.
 */
export type DroppedRun = {
  id: string;
  sessionId: string;
  kind: string;
  handedBack: boolean;
  /** false: its session has no event stream (no RUN_COMPLETED is written for it). */
  sessionEvents: boolean;
};

export class BatchStore {
  constructor(private readonly database: Database) {}

  /** The batch's sessions' usage and cost summed (one aggregate over their model steps). */
  usage(id: string): Promise<UsageTotals> {
    return usageOfBatch(this.database, id);
  }

  private async row(id: string, tenant?: string): Promise<BatchRaw | undefined> {
    const { sql } = this.database;
    const [row] = await sql<{ b: string | BatchRaw }[]>`
      select row_to_json(b) as b from batches b
       where b.id = ${id} and b.deleted_at is null ${tenant === undefined ? sql`` : sql`and b.tenant = ${tenant}`}`;
    return row ? json<BatchRaw>(row.b) : undefined;
  }

  /** Counts by current state: one pass over the batch's sessions and its unfinished runs. */
  async counts(id: string): Promise<BatchCounts> {
    const [row] = await this.database.sql<BatchCounts[]>`
      with s as (
        select s.id, s.status, s.tail_state, s.run_started from sessions s where s.batch_id = ${id}
      ), a as (
        select r.session_id, bool_or(r.status = 'running') as running from runs r
         where r.status <> 'ended' and r.session_id in (select id from s where status = 'active')
         group by r.session_id
      )
      select count(*)::int as total,
             count(*) filter (where s.status = 'cancelled')::int as cancelled,
             count(*) filter (where s.status = 'parked')::int as parked,
             count(*) filter (where s.status = 'active' and (a.running
                or (a.session_id is null and s.run_started and s.tail_state <> 'completed')))::int as running,
             count(*) filter (where s.status = 'active' and not a.running)::int as queued,
             count(*) filter (where s.status = 'active' and a.session_id is null
                and (s.tail_state = 'completed' or not s.run_started))::int as completed
        from s left join a on a.session_id = s.id`;
    return row!;
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
  async view(id: string, tenant?: string): Promise<BatchJson | undefined> {
    const row = await this.row(id, tenant);
    if (!row) return undefined;
    const counts = await this.counts(id);
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
        ? { webhook: { url: row.webhook_url, deliveredAt: iso(row.webhook_delivered_at) ?? null } }
        : {}),
    };
  }

  /** Records that the batch ended (once); returns when. */
  async markEnded(id: string): Promise<string> {
    const [row] = await this.database.sql<{ ended_at: string }[]>`
      update batches set ended_at = coalesce(ended_at, now()) where id = ${id} returning ended_at`;
    return row!.ended_at;
  }

  /**
   * One page of results in session-id order after `after` (keyset paging: each page is an
   * index range scan, so streaming 100,000 results holds one page in memory at a time).
   * `maxBytes`: the page also stops before the result whose output would take it past this
   * many bytes (the first is always there), so 500 outputs of megabytes each are not read at
   * once; a shorter page is then not the last (read on until a page is empty).
   */
  async resultsPage(
    id: string,
    after: string,
    limit: number,
    maxBytes = Number.MAX_SAFE_INTEGER,
  ): Promise<(BatchResult & { id: string })[]> {
    const rows = await this.database.sql<
      {
        id: string;
        custom_id: string | null;
        status: string;
        tail_state: string;
        run_started: boolean;
        parked_reason: string | null;
        cancelled_at: string | null;
        updated_at: string;
        running: boolean | null;
        output: string | null;
        input_tokens: string | null;
        output_tokens: string | null;
        cache_read_tokens: string | null;
        cache_write_tokens: string | null;
        reasoning_tokens: string | null;
        cost_usd: string | null;
        unknown_steps: string | null;
        last_ended: string | null;
      }[]
    >`
      with p as (
        -- The page's sessions, sized by their output (the last assistant text) first: only
        -- those within maxBytes are read whole.
        select s.id, 256 + coalesce((select octet_length(m.content) from messages m
                 where m.session_id = s.id and m.role = 'assistant' order by m.seq desc limit 1), 0) as bytes
          from sessions s where s.batch_id = ${id} and s.id > ${after}
         order by s.id limit ${limit}
      ), z as (
        select p.id, p.bytes, sum(p.bytes) over (order by p.id rows between unbounded preceding and current row) as upto
          from p
      ), s as materialized (
        select s.id, s.custom_id, s.status, s.tail_state, s.run_started, s.parked_reason, s.cancelled_at,
               s.updated_at
          from z join sessions s on s.id = z.id
         where z.upto <= ${maxBytes}::bigint or z.upto = z.bytes
      ), r as (
        -- The page's runs in one read (one index scan for the page's ids), not two per session.
        select r.session_id, bool_or(r.status = 'running') filter (where r.status <> 'ended') as running,
               max(r.ended_at) as last_ended
          from runs r where r.session_id = any(array(select s.id from s))
         group by r.session_id
      )
      select s.*, r.running, r.last_ended,
             (select m.content from messages m where m.session_id = s.id and m.role = 'assistant'
               order by m.seq desc limit 1) as output,
             u.input_tokens, u.output_tokens, u.cache_read_tokens, u.cache_write_tokens, u.reasoning_tokens,
             u.cost_usd, u.unknown_steps
        from s
        left join r on r.session_id = s.id
        left join lateral (
          select ${this.database.sql.unsafe(USAGE_SUMS)}
            from messages m where m.session_id = s.id and m.role = 'assistant'
        ) u on true
       order by s.id`;
    return rows.map((r) => {
      const status = resultStatus(r);
      const terminal = status === "completed" || status === "parked" || status === "cancelled";
      return {
        id: r.id,
        customId: r.custom_id,
        sessionId: r.id,
        status,
        ...(status === "parked" && r.parked_reason !== null ? { parkedReason: r.parked_reason } : {}),
        output: r.tail_state === "completed" ? r.output : null,
        usage: totalsOfRow(r),
        endedAt: terminal
          ? (iso(status === "cancelled" ? r.cancelled_at : (r.last_ended ?? r.updated_at)) ?? null)
          : null,
      };
    });
  }

  /** Postgres's clock: what batch events compare `updated_at` with (not this host's clock). */
  async clock(): Promise<Date> {
    const [row] = await this.database.sql<{ t: string | Date }[]>`select now() as t`;
    return new Date(row!.t);
  }

  /**
   * One page of the batch's sessions with those in a terminal state: what `SESSION_ENDED`
   * events need, without the output and usage a result reads. Either every session, in id
   * order after `after.id` (`since` absent), or only those whose row changed at or after
   * `since`, in (updated_at, id) order after `after` — an index range on
   * `sessions_batch_updated_idx`, so a pass costs what changed, not the batch's size.
   * `next`: where the next page starts (null: this page was the last).
   */
  async endedPage(
    id: string,
    after: ListCursor | null,
    limit: number,
    since?: Date,
  ): Promise<{ next: ListCursor | null; ended: EndedSession[] }> {
    const { sql } = this.database;
    const from =
      since === undefined
        ? sql`and s.id > ${after?.id ?? ""} order by s.id`
        : sql`and (s.updated_at, s.id) > (timestamptz 'epoch' + ${after?.micros ?? String(since.getTime() * 1000)}::bigint * interval '1 microsecond', ${after?.id ?? ""})
              order by s.updated_at, s.id`;
    const rows = await sql<
      {
        id: string;
        custom_id: string | null;
        status: string;
        tail_state: string;
        run_started: boolean;
        parked_reason: string | null;
        running: boolean | null;
        micros: string;
        last_run: string | null;
      }[]
    >`
      select s.id, s.custom_id, s.status, s.tail_state, s.run_started, s.parked_reason,
             (select r.id from runs r where r.session_id = s.id
               order by r.queue_seq desc, r.created_at desc, r.id desc limit 1) as last_run,
             (select bool_or(r.status = 'running') from runs r
               where r.session_id = s.id and (r.status <> 'ended') is true) as running,
             (extract(epoch from s.updated_at) * 1000000)::bigint::text as micros
        from sessions s
       where s.batch_id = ${id} ${from}
       limit ${limit}`;
    const ended: EndedSession[] = [];
    for (const r of rows) {
      const status = resultStatus(r);
      if (status !== "completed" && status !== "parked" && status !== "cancelled") continue;
      ended.push({
        id: r.id,
        customId: r.custom_id,
        status,
        ...(status === "parked" && r.parked_reason !== null ? { parkedReason: r.parked_reason } : {}),
        lastRun: r.last_run,
      });
    }
    const last = rows.at(-1);
    return { next: rows.length === limit && last ? { micros: last.micros, id: last.id } : null, ended };
  }

  /**
   * Cancels sessions (contracts §9) in one statement: those not yet terminal become
   * `cancelled` (never resumed automatically) and their queued runs end `cancelled`. A run
   * that is running is aborted by its worker: it learns it from Redis at once, and from
   * this row before its next tool starts. Returns the cancelled sessions and dropped runs.
   */
  async cancel(
    tenant: string,
    target: { sessionId: string } | { batchId: string },
  ): Promise<{ sessionIds: string[]; dropped: DroppedRun[] }> {
    const { sql } = this.database;
    const where =
      "sessionId" in target ? sql`s.id = ${target.sessionId}` : sql`s.batch_id = ${target.batchId}`;
    return sql.begin(async (tx) => {
      // The batch's row is locked first, so that no part is appended while its sessions are
      // cancelled (appends lock it too, session-creation.ts).
      const [batch] =
        "batchId" in target
          ? await tx<{ open: boolean }[]>`
              select open from batches where id = ${target.batchId} and tenant = ${tenant}
                 and deleted_at is null for update`
          : [];
      // The sessions are locked first, in a statement of their own: a sweeper or worker that
      // is queueing an automatic resume of one of them (under that row's lock,
      // automatic-resumes.ts) commits before this returns, and the update below, which reads
      // a newer snapshot, sees that run and drops it. Locked by the update alone, such a run
      // was invisible to it and stayed queued on the cancelled session for ever (its
      // resume-point answering `running`).
      await tx`select s.id from sessions s
                where ${where} and s.tenant = ${tenant} and s.status = 'active'
                order by s.id for no key update of s`;
      const [row] = await tx<{ sessions: string[] | string; dropped: DroppedRun[] | string }[]>`
        with c as (
          update sessions s set status = 'cancelled', cancelled_at = now(), next_resume_at = null,
                                updated_at = now()
           where ${where} and s.tenant = ${tenant} and s.status = 'active'
             and (exists (select 1 from runs r where r.session_id = s.id and r.status <> 'ended')
                  or (s.run_started and s.tail_state <> 'completed'))
          returning s.id, s.session_events
        ), q as (
          update runs r set status = 'ended', ended_reason = 'cancelled', ended_at = now(),
                            error = 'cancelled by request'
           where r.session_id in (select id from c) and r.status = 'queued'
          returning r.id, r.session_id, r.kind, r.started_at is not null as handed_back,
                    (select c.session_events from c where c.id = r.session_id) as session_events
        )
        select (select coalesce(json_agg(id), '[]'::json) from c) as sessions,
               (select coalesce(json_agg(json_build_object('id', id, 'sessionId', session_id, 'kind', kind,
                                                           'handedBack', handed_back,
                                                           'sessionEvents', session_events)), '[]'::json)
                  from q) as dropped`;
      const sessionIds = json<string[]>(row!.sessions);
      // A batch is marked cancelled only when the cancel stopped something: sessions that had
      // not ended, or more parts (an open batch). A batch whose sessions had all ended keeps
      // its status (`ended`, as its webhook said), like its sessions keep theirs.
      if ("batchId" in target && batch && (batch.open || sessionIds.length > 0)) {
        await tx`update batches set cancelled_at = coalesce(cancelled_at, now()), open = false
                  where id = ${target.batchId} and tenant = ${tenant}`;
      }
      return {
        sessionIds,
        dropped: json<DroppedRun[]>(row!.dropped),
      };
    });
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

  /** Whether the batch has ended and its webhook is neither delivered nor given up. */
  async webhookOwed(id: string): Promise<boolean> {
    const [row] = await this.database.sql<{ owed: boolean }[]>`
      select (ended_at is not null and webhook_url is not null and webhook_delivered_at is null
              and webhook_failed_at is null) as owed
        from batches where id = ${id} and deleted_at is null`;
    return row?.owed ?? false;
  }

  /**
   * The priority of a batch's webhook delivery (BullMQ: 1 first): 1 + how many webhooks its
   * tenant owes for older batches, at most WEBHOOK_RANK_CAP + 1. So a tenant's k-th owed webhook
   * goes out about with every other tenant's k-th, and one tenant's flood of batches whose
   * receivers hang (each attempt holds a delivery slot for up to 10 s) no longer queues every
   * other tenant's webhook behind all of them. Read on the tenant's index, at most the cap's rows.
   */
  async webhookPriority(batch: Pick<Unsettled, "id" | "tenant" | "createdAt">): Promise<number> {
    const [row] = await this.database.sql<{ n: number }[]>`
      select count(*)::int as n from (
        select 1 from batches
         where tenant = ${batch.tenant} and (created_at, id) < (${batch.createdAt}::timestamptz, ${batch.id})
           and deleted_at is null and ended_at is not null and webhook_url is not null
           and webhook_delivered_at is null and webhook_failed_at is null
         limit ${WEBHOOK_RANK_CAP}) as ahead`;
    return 1 + (row?.n ?? 0);
  }

  /** The webhook URL of a batch, for a delivery. */
  async webhookUrl(id: string): Promise<string | null> {
    return (await this.row(id))?.webhook_url ?? null;
  }

  async markDelivered(id: string): Promise<void> {
    await this.database.sql`update batches set webhook_delivered_at = now() where id = ${id}`;
  }

  async markDeliveryFailed(id: string): Promise<void> {
    await this.database.sql`update batches set webhook_failed_at = now() where id = ${id}`;
  }
}
