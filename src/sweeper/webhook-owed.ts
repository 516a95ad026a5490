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
 * the timeline), not a fresh 40 attempts queued — one retry budget per webhook. A job that
 * failed before its attempts were spent (its sweepers killed mid-delivery past BullMQ's stall
 * limit) is queued again.
 */
import type { Job, Queue } from "bullmq";
import { enqueueWebhook, QUEUES } from "../shared/queues.js";

const FAILED_SETTLE_MS = 60_000;

/** What to do with the job found under a webhook's id (pure). */
export function webhookJobAction(
  job: { state: string; finishedOn?: number; attemptsSpent?: boolean } | null,
  now: number,
): "queue" | "leave" | "requeue-if-owed" | "record-failed-if-owed" {
  if (job === null) return "queue";
  switch (job.state) {
    case "completed":
      return "requeue-if-owed";
    case "failed":
      if (now - (job.finishedOn ?? now) < FAILED_SETTLE_MS) return "leave";
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
  } = {},
): Promise<"queued" | "requeued" | "recorded-failed" | "left"> {
  const { now = Date.now(), priority, markFailed } = options;
  const job = (await queue.getJob(QUEUES.webhooks.jobId({ batchId }))) as Job | undefined;
  const state = job ? await job.getState() : null;
  const action = webhookJobAction(
    job && state
      ? {
          state,
          finishedOn: job.finishedOn,
          attemptsSpent: job.attemptsMade >= (job.opts.attempts ?? 1),
        }
      : null,
    now,
  );
  switch (action) {
    case "queue":
      await enqueueWebhook(queue, { batchId }, await priority?.());
      return "queued";
    case "leave":
      return "left";
    case "record-failed-if-owed":
      if (!markFailed || !(await stillOwed(batchId))) return "left";
      await markFailed(batchId);
      return "recorded-failed";
    case "requeue-if-owed":
      if (!(await stillOwed(batchId))) return "left";
      await job!.remove();
      await enqueueWebhook(queue, { batchId }, await priority?.());
      return "requeued";
  }
}
