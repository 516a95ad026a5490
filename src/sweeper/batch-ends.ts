/**
 * Batch ends and their webhooks (contracts §9), run by the sweeper process.
 *
 * Who notices that a batch ended must survive crashes: the sweeper derives it from Postgres
 * on every wide scan (BatchStore.endedAmong, for a page of batches at once), records `ended_at`, and queues the delivery
 * with the deterministic job id `webhook-<batchId>`; a batch whose webhook is still owed is
 * queued again every few seconds, which adds nothing while the job exists. Deliveries run
 * here too, on a BullMQ worker of their own: they are few, slow receivers must never hold
 * an agent worker's slot, and a tenant's URL is requested only from the one role that does
 * no agent work. Retries: exponential from FLEET_WEBHOOK_RETRY_MS up to an hour, 40
 * attempts (more than 24 h), a resend after its sweeper died counted as one, at most
 * WEBHOOK_MAX_STALLS of those; then the batch is marked `webhook_failed_at`. The budget
 * outlives a Redis that lost its data: each failed attempt is counted in Postgres
 * (`webhook_attempts`), and a job queued anew carries that count and the batch's end, whence
 * its day runs (BatchStore.webhookBudget); one whose count is spent is recorded given up.
 */
import type { ConnectionOptions, Job, Queue } from "bullmq";
import type { Logger } from "pino";
import { type BullWorker, newBullWorker } from "../shared/bull-worker.js";
import { bullmq } from "../shared/cjs-packages.js";
import { toValidationError } from "../shared/messages.js";
import type { FleetMetrics } from "../shared/metrics.js";
import {
  QUEUES,
  WEBHOOK_ATTEMPTS,
  WEBHOOK_BACKOFF,
  WEBHOOK_MAX_STALLS,
  webhookJobSchema,
} from "../shared/queues.js";
import type { BatchStore, UnsettledCursor } from "../shared/store/batches.js";
import { priorOf } from "../shared/webhook-backoff.js";
import { attemptErrorText, deliveryBody, tenantTextOf, webhookErrorText } from "../shared/webhook-errors.js";
import { postWebhook, type WebhookSettings, webhookBackoffMs } from "../shared/webhooks.js";
import { ENSURE_EVERY_MS, ensureWebhookQueued, webhookBudgetSpent } from "./webhook-owed.js";
import { waitWhileReopened } from "./webhook-reopened.js";
import { deliverySignature, type SecretGenerations } from "./webhook-signing.js";
import { receiverTookIt } from "./webhook-taken.js";

/** Unsettled batches one scan looks at. */
const PAGE = 500;

export class BatchEnds {
  private readonly ensured = new Map<string, number>();
  /**
   * Where the next scan reads on (none: from the oldest). Each scan takes the next page, and
   * starts over after a short one, so every unsettled batch is looked at within
   * ceil(unsettled / 500) scans: 500 batches whose webhooks stay owed (a receiver down for a
   * day) no longer hide every batch behind them.
   */
  private after: UnsettledCursor | undefined;

  constructor(
    private readonly deps: {
      store: BatchStore;
      queue: Queue;
      log: Pick<Logger, "info" | "warn">;
      now?: () => number;
    },
  ) {}

  /** Records the batches that ended and queues their webhooks; returns how many ended now. */
  async scan(): Promise<number> {
    const now = (this.deps.now ?? Date.now)();
    let endedNow = 0;
    const page = await this.deps.store.unsettled(PAGE, this.after);
    this.after = page.length < PAGE ? undefined : page.at(-1);
    // One look for the whole page: a look per batch cost a transaction per unsettled batch on
    // every scan, so a backlog of small batches (a backend's parts of 50) cost one each second.
    const ended = await this.deps.store.endedAmong(page.filter((b) => !b.ended).map((b) => b.id));
    for (const batch of page) {
      let fresh = false;
      if (!batch.ended) {
        if (!ended.has(batch.id)) continue;
        await this.deps.store.markEnded(batch.id);
        this.deps.log.info({ batchId: batch.id }, "batch ended");
        endedNow++;
        fresh = true;
      }
      if (!batch.webhookOwed) continue;
      if (!fresh && now - (this.ensured.get(batch.id) ?? 0) < ENSURE_EVERY_MS) continue;
      const done = await ensureWebhookQueued(
        this.deps.queue,
        batch.id,
        (id) => this.deps.store.webhookOwed(id),
        {
          priority: () => this.deps.store.webhookPriority(batch),
          markFailed: (id) => this.deps.store.markDeliveryFailed(id),
          markDelivered: (id) => this.deps.store.markDelivered(id),
          budget: (id) => this.deps.store.webhookBudget(id),
        },
      );
      if (done === "recorded-delivered")
        this.deps.log.warn(
          { batchId: batch.id },
          "the batch's webhook was taken by its receiver but its job failed before that was recorded: recorded it delivered now",
        );
      if (done === "recorded-failed")
        this.deps.log.warn(
          { batchId: batch.id },
          "the batch's webhook failed its last attempt but that was not recorded: recorded it now, not queued again",
        );
      if (done === "requeued")
        this.deps.log.warn(
          { batchId: batch.id },
          "the batch's webhook is owed but its job had finished (Postgres restored from an earlier point?): queued it again",
        );
      this.ensured.set(batch.id, now);
    }
    if (this.ensured.size > 10_000) this.ensured.clear();
    return endedNow;
  }
}

/** The BullMQ worker that delivers webhooks. */
export function startWebhookWorker(options: {
  connection: ConnectionOptions;
  prefix: string;
  store: BatchStore;
  settings: WebhookSettings;
  generations?: SecretGenerations; // each tenant's secret's generation (webhook-signing.ts)
  log: Pick<Logger, "info" | "warn">;
  metrics?: Pick<FleetMetrics, "webhookDeliveries">;
  concurrency?: number;
}): BullWorker {
  const { store, settings, generations, log, metrics } = options;
  const worker = newBullWorker(
    QUEUES.webhooks.name,
    async (job: Job, token?: string) => {
      const parsed = webhookJobSchema.safeParse(job.data);
      // Bad input (a job added by hand, another release's shape) fails once and is never retried.
      if (!parsed.success)
        throw new bullmq.UnrecoverableError(toValidationError("job.data", parsed.error).message);
      const { batchId, priorAttempts = 0 } = parsed.data;
      // A delivery whose sweeper died mid-way (a stalled job, sent again) is another attempt
      // too, and so is each begun by the webhook's jobs lost with Redis (Postgres counts them).
      const attempt = priorAttempts + job.attemptsMade + (job.stalledCounter ?? 0) + 1;
      // An earlier attempt's receiver took it and only recording that failed: record it, send nothing.
      if (receiverTookIt(job.progress)) return recordDelivered(store, batchId, log, attempt);
      // Stalls spend the one budget too: not sent past it (recorded failed by "failed" below).
      const spent = webhookBudgetSpent({
        attemptsMade: job.attemptsMade,
        stalledCounter: job.stalledCounter,
        attempts: job.opts.attempts,
        priorAttempts,
      });
      if (spent !== null) throw new bullmq.UnrecoverableError(spent);
      const target = await store.webhookTarget(batchId);
      const batch = target === null ? undefined : await store.view(batchId);
      if (target === null || !batch) return "nothing to deliver";
      await waitWhileReopened(job, token, batch.status === "running", attempt, settings);
      const body = JSON.stringify(deliveryBody(batch));
      // The tenant's own secrets when the operator opted in (webhook-signing.ts), else the fleet's.
      const signature = await deliverySignature(settings, generations, target.tenant, body);
      try {
        const status = await postWebhook(
          target.url,
          body,
          {
            "fleet-signature": signature,
            "fleet-delivery-id": String(job.id),
            "fleet-delivery-attempt": String(attempt),
          },
          settings,
        );
        if (status < 200 || status >= 300) throw new Error(`the receiver answered HTTP ${status}`);
      } catch (error) {
        // What webhook.lastError says (the log says the error's own message).
        const tenantText = attemptErrorText(error, target.url);
        // Counted in Postgres: a job lost with Redis is queued anew from here. (Only a failed
        // attempt: counted before the send, it waited on the batch's row, which a stuck record
        // of a delivery may hold; an attempt its sweeper died in goes uncounted there.)
        await store.recordWebhookAttempt(batchId, attempt).catch(() => {});
        // The budget's last attempt (stalls counted): failed for good, not retried by BullMQ,
        // whose own count knows nothing of the stalls.
        if (attempt >= Math.min(job.opts.attempts ?? WEBHOOK_ATTEMPTS, WEBHOOK_ATTEMPTS))
          throw Object.assign(new bullmq.UnrecoverableError((error as Error).message), { tenantText });
        throw Object.assign(error as Error, { tenantText });
      }
      // Kept on the job (in Redis) before it is counted: should recording it in Postgres fail,
      // the job's retry records it without sending it again, and nothing is counted twice.
      try {
        await job.updateProgress({ receiverTookIt: true });
      } catch (error) {
        throw new WebhookRecordError(error);
      }
      metrics?.webhookDeliveries.inc({ outcome: "delivered" });
      return recordDelivered(store, batchId, log, attempt);
    },
    {
      connection: options.connection,
      prefix: options.prefix,
      concurrency: options.concurrency ?? 8,
      // A sweeper that dies during a delivery: another one sends it again within
      // lockDuration + stalledInterval (FLEET_WEBHOOK_LOCK_MS + _STALL_CHECK_MS, by default
      // ≤ 15 s), not BullMQ's defaults' ~60 s. Each such resend spends an attempt (above);
      // one stall past WEBHOOK_MAX_STALLS fails the job (BullMQ), and "failed" records the give-up.
      lockDuration: settings.lockMs,
      stalledInterval: settings.stallCheckMs,
      maxStalledCount: WEBHOOK_MAX_STALLS,
      settings: {
        backoffStrategy: (attemptsMade, type, _error, job) =>
          type === WEBHOOK_BACKOFF ? webhookBackoffMs(settings, attemptsMade, job) : 1_000,
      },
    },
  );
  worker.on("error", () => {});
  worker.on("failed", (job, error) => {
    if (!job) return;
    if (error.name === "UnrecoverableError" && !webhookJobSchema.safeParse(job.data).success) {
      // Not a delivery: nothing was sent, and the job is not retried.
      log.warn({ jobId: job.id, err: error.message }, "malformed webhook job failed; not retried");
      return;
    }
    const batchId = String((job.data as { batchId?: unknown }).batchId ?? "");
    // The last attempt failed, or the budget is spent: the stalls past WEBHOOK_MAX_STALLS
    // (BullMQ fails that job as an UnrecoverableError) or those that took the last attempts.
    const { priorAttempts } = priorOf(job.data);
    const spent =
      webhookBudgetSpent({
        attemptsMade: job.attemptsMade,
        stalledCounter: job.stalledCounter,
        attempts: job.opts.attempts,
        priorAttempts,
      }) ?? (error.name === "UnrecoverableError" ? error.message : null);
    const last = spent !== null;
    const outcome = failureOutcome(error, last);
    if (outcome === null || receiverTookIt(job.progress)) {
      // Its receiver took it (counted delivered then): never a failed delivery, even with the
      // budget spent (stalls past the limit while recording it, every record failing).
      log.warn(
        { batchId, attempt: job.attemptsMade, err: error.message, last },
        last
          ? "webhook delivered, but its job failed before the delivery was recorded; recording it now"
          : "webhook delivered, but recording the delivery failed; the record is tried again",
      );
      if (last && batchId) store.markDelivered(batchId).catch(() => {});
      return;
    }
    log.warn(
      {
        batchId,
        attempt: priorAttempts + job.attemptsMade + (job.stalledCounter ?? 0),
        err: error.message,
        last,
        reason: spent ?? undefined,
      },
      last ? `webhook delivery failed; given up: ${spent}` : "webhook delivery failed",
    );
    metrics?.webhookDeliveries.inc({ outcome });
    if (!batchId) return;
    // Why, for GET /v1/batches/:id's webhook.lastError: each attempt's reason, then the give-up's.
    const reason = webhookErrorText(
      {
        attempt: priorAttempts + job.attemptsMade + (job.stalledCounter ?? 0),
        message: tenantTextOf(error),
        ...(last ? { givenUp: spent === error.message ? tenantTextOf(error) : spent } : {}),
      },
      [settings.secret],
    );
    (last ? store.markDeliveryFailed(batchId, reason) : store.recordDeliveryError(batchId, reason)).catch(
      () => {},
    );
  });
  return worker;
}

/** The receiver took the delivery (2xx), and recording it afterwards failed. */
export class WebhookRecordError extends Error {
  constructor(cause: unknown) {
    super(`the receiver took the webhook; recording that failed: ${(cause as Error)?.message ?? cause}`);
    this.name = "WebhookRecordError";
  }
}

/**
 * How a failed attempt counts in `fleet_webhook_deliveries_total` (pure): a receiver that did
 * not take it, `failed` (tried again) or `abandoned` (the last attempt); null when the receiver
 * took it and only recording that failed — already counted `delivered`, it is no failed delivery.
 */
export function failureOutcome(error: Error, last: boolean): "failed" | "abandoned" | null {
  if (error.name === "WebhookRecordError") return null;
  return last ? "abandoned" : "failed";
}

async function recordDelivered(
  store: Pick<BatchStore, "markDelivered">,
  batchId: string,
  log: Pick<Logger, "info">,
  attempt: number,
): Promise<string> {
  try {
    await store.markDelivered(batchId);
  } catch (error) {
    throw new WebhookRecordError(error);
  }
  log.info({ batchId, attempt }, "webhook delivered");
  return "delivered";
}
