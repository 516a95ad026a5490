/**
 * A delivery whose batch runs again since its end (a batch resume, a new message to one of its
 * sessions) while its webhook is still owed: the webhook reports an end, so it waits for the
 * next one, looked at again without spending an attempt. Sent then, it said `running` with no
 * `endedAt`, and no webhook followed that end (test/webhook-reopened-batch.test.ts). The wait
 * is kept on the job (webhook-backoff.ts `holdAfterLook`): it is not counted in the day of
 * retries, so the last attempt, due while the batch ran, waits for the rest of that day.
 */
import type { Job } from "bullmq";
import { bullmq } from "../shared/cjs-packages.js";
import { holdAfterLook, holdOf, waitBeforeAttempt } from "../shared/webhook-backoff.js";
import type { WebhookSettings } from "../shared/webhooks.js";
import { ENSURE_EVERY_MS } from "./webhook-owed.js";

/**
 * How often a delivery whose batch is running again looks whether it has ended (pure): ten
 * first retry delays, at most ENSURE_EVERY_MS (10 s by default).
 */
export const reopenedPollMs = (settings: Pick<WebhookSettings, "retryBaseMs">): number =>
  Math.min(ENSURE_EVERY_MS, Math.max(100, settings.retryBaseMs * 10));

/**
 * Before attempt `attempt` of `job`: while the batch runs (`running`), and for its last attempt
 * until its day of tries is over, the job is delayed, spending no attempt (BullMQ's
 * DelayedError thrown); else it returns and the attempt is sent.
 */
export async function waitWhileReopened(
  job: Job,
  token: string | undefined,
  running: boolean,
  attempt: number,
  settings: Pick<WebhookSettings, "retryBaseMs">,
): Promise<void> {
  const now = Date.now();
  const hold = holdAfterLook(job.data, running, now);
  if (hold.heldSince !== holdOf(job.data).heldSince) await job.updateData({ ...job.data, ...hold });
  const wait = running ? reopenedPollMs(settings) : waitBeforeAttempt(job, attempt, now);
  if (wait <= 0) return;
  await job.moveToDelayed(now + wait, token);
  throw new bullmq.DelayedError();
}
