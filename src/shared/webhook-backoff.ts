/**
 * How long a failed webhook delivery waits before its next attempt (pure): contracts §9 retry
 * it "for at least 24 h". The delays double from FLEET_WEBHOOK_RETRY_MS up to an hour (±10 %),
 * which from the default 1 s spreads the 40 attempts over about 28 h; a shorter first delay
 * spends more of them on the doubling (from 10 ms the last came after 21.5 h, 19.3 h with the
 * jitter at its lowest). So the retry before the last attempt also waits for whatever is left
 * of the 24 h since the delivery was queued (its batch's end): early retries stay as the
 * operator set them, and the last attempt never comes before a day has passed.
 *
 * The time its batch ran again is not counted in the day (a resume or a new message while the
 * webhook was owed: the delivery waits, sending nothing, until the batch ends again), from the
 * look that found it running to the one that found it ended: kept on the job as `heldMs` (and
 * `heldSince`, while a wait goes on). Counted, from a short first delay (10 ms), a batch that
 * ran again for 10 h had its end tried for 19.3 h. The end it reaches again does not start the
 * day afresh, nor give attempts back: the webhook is tried for the day the contract says, plus
 * what its batch ran, with its 40 attempts (test/webhook-held-span.test.ts).
 */
import { WEBHOOK_ATTEMPTS } from "./queues.js";

/** The span contracts §9 promises: the last attempt comes at least this long after the first. */
export const WEBHOOK_RETRY_SPAN_MS = 24 * 3_600_000;

/** What a delivery keeps on its job (its data) of the waits while its batch ran again. */
export type DeliveryHold = { heldMs?: number; heldSince?: number };

/** What of a BullMQ job the delay looks at. */
export type RetriedDelivery = {
  timestamp: number;
  stalledCounter?: number;
  opts: { attempts?: number };
  /** The job's data: its DeliveryHold fields, when it has any. */
  data?: unknown;
};

/** The job data's DeliveryHold (pure): fields that are not finite numbers are left out. */
export function holdOf(data: unknown): DeliveryHold {
  const hold: DeliveryHold = {};
  if (typeof data !== "object" || data === null) return hold;
  const { heldMs, heldSince } = data as Record<string, unknown>;
  if (typeof heldMs === "number" && Number.isFinite(heldMs)) hold.heldMs = heldMs;
  if (typeof heldSince === "number" && Number.isFinite(heldSince)) hold.heldSince = heldSince;
  return hold;
}

/**
 * What a job carries of the webhook's budget spent before it (pure): the attempts its earlier
 * jobs began (lost with Redis: Postgres counts them) and the first queueing, whose day the
 * last attempt waits for; a job without them (the first) has spent nothing, queued now.
 */
export function priorOf(data: unknown): { priorAttempts: number; firstQueuedAt: number | undefined } {
  const { priorAttempts, firstQueuedAt } = (typeof data === "object" && data !== null ? data : {}) as Record<
    string,
    unknown
  >;
  return {
    priorAttempts:
      typeof priorAttempts === "number" && Number.isInteger(priorAttempts) && priorAttempts > 0
        ? priorAttempts
        : 0,
    firstQueuedAt:
      typeof firstQueuedAt === "number" && Number.isFinite(firstQueuedAt) ? firstQueuedAt : undefined,
  };
}

/**
 * The hold after a look at the batch at `now` (pure): running, a wait starts (or goes on);
 * ended, the wait that went on is added to `heldMs`. Both fields are always given (`heldSince`
 * undefined when no wait goes on), so that it can be spread over the job's data.
 */
export function holdAfterLook(
  data: unknown,
  running: boolean,
  now: number,
): { heldMs: number; heldSince: number | undefined } {
  const { heldMs = 0, heldSince } = holdOf(data);
  if (running) return { heldMs, heldSince: heldSince ?? now };
  return {
    heldMs: heldMs + (heldSince === undefined ? 0 : Math.max(0, now - heldSince)),
    heldSince: undefined,
  };
}

/**
 * Whether attempt `attempt` (1 for the first, stalls counted) is the last of a job that has the
 * full WEBHOOK_ATTEMPTS (pure): a job queued by hand with fewer is not held for a day.
 */
function isHeldLast(job: RetriedDelivery, attempt: number): boolean {
  const attempts = job.opts.attempts ?? WEBHOOK_ATTEMPTS;
  return attempts >= WEBHOOK_ATTEMPTS && attempt >= WEBHOOK_ATTEMPTS;
}

/** When the last attempt may come (pure): a day after the first queueing, plus the waits held. */
function lastNotBefore(job: RetriedDelivery): number {
  const first = priorOf(job.data).firstQueuedAt ?? job.timestamp;
  return first + WEBHOOK_RETRY_SPAN_MS + (holdOf(job.data).heldMs ?? 0);
}

/**
 * How long to wait, spending no attempt, before sending attempt `attempt` (pure): the last,
 * when it fell due while the batch ran again, waits for the rest of its day; else 0.
 */
export function waitBeforeAttempt(job: RetriedDelivery, attempt: number, now: number): number {
  return isHeldLast(job, attempt) ? Math.max(0, lastNotBefore(job) - now) : 0;
}

/**
 * The delay before retry `attemptsMade` (BullMQ's count of failed attempts, this one
 * included): base × 2^(n−1), at most an hour, ±10 %; when the next attempt is the delivery's
 * last (its sweepers' deaths counted, as the worker counts them) and `job` has the full
 * WEBHOOK_ATTEMPTS, at least what is left of WEBHOOK_RETRY_SPAN_MS since it was queued, the
 * waits while its batch ran again not counted.
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
  const made = priorOf(job.data).priorAttempts + attemptsMade + (job.stalledCounter ?? 0);
  const nextIsLast = made + 1 >= Math.min(attempts, WEBHOOK_ATTEMPTS);
  if (!nextIsLast || attempts < WEBHOOK_ATTEMPTS) return jittered;
  return Math.max(jittered, lastNotBefore(job) - now);
}
