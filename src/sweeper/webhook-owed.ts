/**
 * A webhook Postgres says is owed, queued so that it is delivered (contracts §9).
 *
 * The delivery's job id is `webhook-<batchId>` (the `Fleet-Delivery-Id`), so queueing it again
 * adds nothing while the job exists — and a finished job stays in BullMQ for 24 h
 * (removeOnComplete). After Postgres is restored to a point before the delivery was recorded
 * (README, Restoring from backups), Postgres owes the webhook again while Redis keeps the
 * finished job of the lost timeline: the batch's end was never delivered again. So a finished
 * job of a webhook that Postgres, asked after the job was seen finished, still owes is removed
 * and queued anew, under the same id: at least once, with the delivery id a receiver dedupes on.
 * A delivered job records the delivery before it completes (batch-ends.ts), so a completed job
 * of an owed webhook is one from another timeline; a job that failed its last attempt records
 * it just after, so it is looked at only once FAILED_SETTLE_MS have passed. Such a job spent
 * the webhook's attempts: its give-up is recorded now (that record failed, or was lost with
 * the timeline), not a fresh 40 attempts queued — one retry budget per webhook. Its budget is
 * spent too when its sweepers died during it more often than WEBHOOK_MAX_STALLS (a delivery
 * that kills its sender each time: before, that job was queued again with a fresh budget a
 * minute later, four more kills, without end; test/webhook-poison-stalls.test.ts). A job that
 * failed with its budget left (bad data under a batch's job id) is queued again. A failed job
 * whose receiver took the webhook (kept on the job before its record: batch-ends.ts) is
 * recorded delivered, spent or not: it was delivered, only its record was lost (sweepers
 * killed while recording it past the stall limit, or every record failing; it was marked
 * failed; test/webhook-taken-not-failed.test.ts).
 */
import type { Job, Queue } from "bullmq";
import { enqueueWebhook, QUEUES, WEBHOOK_ATTEMPTS, WEBHOOK_MAX_STALLS } from "../shared/queues.js";
import { priorOf } from "../shared/webhook-backoff.js";
import { receiverTookIt } from "./webhook-taken.js";

const FAILED_SETTLE_MS = 60_000;

/** A batch whose webhook is owed is queued again at most this often (a no-op while its job exists). */
export const ENSURE_EVERY_MS = 10_000;

/**
 * Why a webhook's one retry budget is spent (pure), or null while it is not: WEBHOOK_ATTEMPTS
 * sends in all, each stall (its sweeper died during it, BullMQ sent it again) counted as one,
 * and at most WEBHOOK_MAX_STALLS stalls. `attempts`: the job's own limit (opts.attempts).
 */
export function webhookBudgetSpent(job: {
  attemptsMade: number;
  stalledCounter?: number;
  attempts?: number;
  /** Attempts begun by the webhook's earlier jobs (lost with Redis), as Postgres counts them. */
  priorAttempts?: number;
}): string | null {
  const stalls = job.stalledCounter ?? 0;
  if (stalls > WEBHOOK_MAX_STALLS)
    return `its sweeper died during the delivery ${stalls} times (the delivery may be what kills it)`;
  const limit = Math.min(job.attempts ?? WEBHOOK_ATTEMPTS, WEBHOOK_ATTEMPTS);
  if ((job.priorAttempts ?? 0) + job.attemptsMade + stalls >= limit)
    return stalls > 0
      ? `its ${limit} attempts are spent (${stalls} of them ended by its sweeper's death)`
      : `its ${limit} attempts are spent`;
  return null;
}

/** What to do with the job found under a webhook's id (pure). */
export function webhookJobAction(
  job: { state: string; finishedOn?: number; attemptsSpent?: boolean; receiverTookIt?: boolean } | null,
  now: number,
): "queue" | "leave" | "requeue-if-owed" | "record-failed-if-owed" | "record-delivered-if-owed" {
  if (job === null) return "queue";
  switch (job.state) {
    case "completed":
      return "requeue-if-owed";
    case "failed":
      if (now - (job.finishedOn ?? now) < FAILED_SETTLE_MS) return "leave";
      if (job.receiverTookIt) return "record-delivered-if-owed";
      return job.attemptsSpent ? "record-failed-if-owed" : "requeue-if-owed";
    default:
      // waiting, delayed, active, prioritized, waiting-children, unknown (gone meanwhile)
      return job.state === "unknown" ? "queue" : "leave";
  }
}

export async function ensureWebhookQueued(
  queue: Queue,
  batchId: string,
  /** Whether Postgres owes this batch's webhook now (asked after the job was read). */
  stillOwed: (batchId: string) => Promise<boolean>,
  options: {
    now?: number;
    /** The delivery's priority, asked only when a job is added (none: BullMQ's default). */
    priority?: () => Promise<number>;
    /** Records that the webhook failed for good (BatchStore.markDeliveryFailed). */
    markFailed?: (batchId: string) => Promise<void>;
    /** Records that the webhook was delivered (BatchStore.markDelivered). */
    markDelivered?: (batchId: string) => Promise<void>;
    /**
     * The budget Postgres keeps (BatchStore.webhookBudget), asked when a job is added: a job
     * lost with Redis is queued anew where its attempts left off, not with a fresh budget.
     */
    budget?: (batchId: string) => Promise<{ attempts: number; firstQueuedAt: number }>;
  } = {},
): Promise<"queued" | "requeued" | "recorded-failed" | "recorded-delivered" | "left"> {
  const { now = Date.now(), priority, markFailed, markDelivered, budget } = options;
  // Added with what Postgres says was spent; spent whole (every attempt begun, the last job
  // lost with Redis before its give-up was recorded): recorded failed, nothing queued.
  const add = async (): Promise<"queued" | "recorded-failed"> => {
    const spent = await budget?.(batchId);
    if (spent && markFailed && spent.attempts >= WEBHOOK_ATTEMPTS) {
      await markFailed(batchId);
      return "recorded-failed";
    }
    const payload = spent
      ? { batchId, priorAttempts: spent.attempts, firstQueuedAt: spent.firstQueuedAt }
      : { batchId };
    await enqueueWebhook(queue, payload, await priority?.());
    return "queued";
  };
  const job = (await queue.getJob(QUEUES.webhooks.jobId({ batchId }))) as Job | undefined;
  const state = job ? await job.getState() : null;
  const action = webhookJobAction(
    job && state
      ? {
          state,
          finishedOn: job.finishedOn,
          attemptsSpent:
            webhookBudgetSpent({
              attemptsMade: job.attemptsMade,
              stalledCounter: job.stalledCounter,
              attempts: job.opts.attempts ?? 1,
              priorAttempts: priorOf(job.data).priorAttempts,
            }) !== null,
          receiverTookIt: receiverTookIt(job.progress),
        }
      : null,
    now,
  );
  switch (action) {
    case "queue":
      return add();
    case "leave":
      return "left";
    case "record-delivered-if-owed":
      if (!markDelivered || !(await stillOwed(batchId))) return "left";
      await markDelivered(batchId);
      return "recorded-delivered";
    case "record-failed-if-owed":
      if (!markFailed || !(await stillOwed(batchId))) return "left";
      await markFailed(batchId);
      return "recorded-failed";
    case "requeue-if-owed":
      if (!(await stillOwed(batchId))) return "left";
      await job!.remove();
      return (await add()) === "queued" ? "requeued" : "recorded-failed";
  }
}
