/**
 * How long a failed webhook delivery waits before its next attempt (pure): contracts §9 retry
 * it "for at least 24 h". The delays double from FLEET_WEBHOOK_RETRY_MS up to an hour (±10 %),
 * which from the default 1 s spreads the 40 attempts over about 28 h; a shorter first delay
 * spends more of them on the doubling (from 10 ms the last came after 21.5 h, 19.3 h with the
 * jitter at its lowest). So the retry before the last attempt also waits for whatever is left
 * of the 24 h since the delivery was queued (its batch's end): early retries stay as the
 * operator set them, and the last attempt never comes before a day has passed.
 */
import { WEBHOOK_ATTEMPTS } from "./queues.js";

/** The span contracts §9 promises: the last attempt comes at least this long after the first. */
export const WEBHOOK_RETRY_SPAN_MS = 24 * 3_600_000;

/** What of a BullMQ job the delay looks at. */
export type RetriedDelivery = { timestamp: number; stalledCounter?: number; opts: { attempts?: number } };

/**
 * The delay before retry `attemptsMade` (BullMQ's count of failed attempts, this one
 * included): base × 2^(n−1), at most an hour, ±10 %; when the next attempt is the delivery's
 * last (its sweepers' deaths counted, as the worker counts them) and `job` has the full
 * WEBHOOK_ATTEMPTS, at least what is left of WEBHOOK_RETRY_SPAN_MS since it was queued.
 */
export function webhookBackoffMs(
  settings: { retryBaseMs: number },
  attemptsMade: number,
  job?: RetriedDelivery,
  now = Date.now(),
): number {
  const delay = Math.min(3_600_000, settings.retryBaseMs * 2 ** Math.max(0, attemptsMade - 1));
  const jittered = Math.round(delay * (0.9 + Math.random() * 0.2));
  if (!job) return jittered;
  const attempts = job.opts.attempts ?? WEBHOOK_ATTEMPTS;
  const nextIsLast = attemptsMade + (job.stalledCounter ?? 0) + 1 >= Math.min(attempts, WEBHOOK_ATTEMPTS);
  if (!nextIsLast || attempts < WEBHOOK_ATTEMPTS) return jittered;
  return Math.max(jittered, job.timestamp + WEBHOOK_RETRY_SPAN_MS - now);
}
