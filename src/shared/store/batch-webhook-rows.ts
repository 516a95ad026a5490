/**
 * A batch's webhook as Postgres keeps it (contracts §9): whether it is owed, its priority among
 * its tenant's, its target, its retry budget and how its delivery ended. BatchStore's part
 * that the sweeper's webhook delivery (src/sweeper/) reads and writes.
 */
import type { Database } from "../db/client.js";

/** Older owed webhooks of its tenant a delivery's priority counts at most (`webhookPriority`). */
export const WEBHOOK_RANK_CAP = 1_000;

export class BatchWebhookRows {
  constructor(protected readonly database: Database) {}

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
   * tenant owes for batches that ended before it, at most WEBHOOK_RANK_CAP + 1. So a tenant's
   * k-th owed webhook goes out about with every other tenant's k-th, and one tenant's flood of
   * batches whose receivers hang (each attempt holds a delivery slot for up to 10 s) no longer
   * queues every other tenant's webhook behind all of them. Ranked by end, not by creation:
   * batches that end newest first (open ones closed in that order, a big old one ending after
   * small new ones) each had no older one owed yet, so all of them were queued at 1. Read on
   * the tenant's index, at most the cap's rows.
   */
  async webhookPriority(batch: { id: string; tenant: string }): Promise<number> {
    const [row] = await this.database.sql<{ n: number }[]>`
      select count(*)::int as n from (
        select 1 from batches b, (select ended_at, id from batches where id = ${batch.id}) as me
         where b.tenant = ${batch.tenant} and (b.ended_at, b.id) < (me.ended_at, me.id)
           and b.deleted_at is null and b.webhook_url is not null
           and b.webhook_delivered_at is null and b.webhook_failed_at is null
         limit ${WEBHOOK_RANK_CAP}) as ahead`;
    return 1 + (row?.n ?? 0);
  }

  /** The webhook URL of a batch and its tenant (whose secret signs it), for a delivery. */
  async webhookTarget(id: string): Promise<{ url: string; tenant: string } | null> {
    const [row] = await this.database.sql<{ url: string | null; tenant: string }[]>`
      select webhook_url as url, tenant from batches where id = ${id} and deleted_at is null`;
    return row?.url ? { url: row.url, tenant: row.tenant } : null;
  }

  async markDelivered(id: string): Promise<void> {
    await this.database.sql`update batches set webhook_delivered_at = now() where id = ${id}`;
  }

  /**
   * Records that the webhook was given up; `reason` (webhookErrorText), when given, replaces
   * the last attempt's. Without one, what the last attempt stored stays.
   */
  async markDeliveryFailed(id: string, reason?: string): Promise<void> {
    await this.database.sql`update batches set webhook_failed_at = now(),
      webhook_last_error = coalesce(${reason ?? null}::text, webhook_last_error) where id = ${id}`;
  }

  /**
   * The webhook's retry budget as Postgres keeps it, for a delivery job queued now: the
   * attempts that failed so far, and the batch's end, whence its day runs. A read: an update
   * here waited on a batch row that a stuck record of a delivery holds.
   */
  async webhookBudget(id: string): Promise<{ attempts: number; firstQueuedAt: number }> {
    const [row] = await this.database.sql<{ attempts: number; first: number }[]>`
      select webhook_attempts as attempts,
             (extract(epoch from coalesce(ended_at, now())) * 1000)::float8 as first
        from batches where id = ${id}`;
    return { attempts: row?.attempts ?? 0, firstQueuedAt: row?.first ?? Date.now() };
  }

  /** Records that delivery attempt `attempt` (1 for the first, across jobs) failed. */
  async recordWebhookAttempt(id: string, attempt: number): Promise<void> {
    await this.database.sql`update batches set webhook_attempts = greatest(webhook_attempts, ${attempt})
      where id = ${id}`;
  }

  /** Why an attempt failed (webhookErrorText); the webhook is still owed and tried again. */
  async recordDeliveryError(id: string, reason: string): Promise<void> {
    await this.database.sql`update batches set webhook_last_error = ${reason}
      where id = ${id} and webhook_delivered_at is null and webhook_failed_at is null`;
  }
}
