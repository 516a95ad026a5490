/**
 * A webhook whose batch ran again before a delivery got through (a batch resume, a new message
 * to one of its sessions) waits while it runs, without spending an attempt, and reports the
 * batch's next end (test/webhook-reopened-batch.test.ts). Contracts §9's "at least 24 h" of
 * retries were counted from the delivery's first queueing, the time the batch ran included:
 * with a short FLEET_WEBHOOK_RETRY_MS, whose 40 attempts rely on the last one waiting for the
 * day, a batch that ran again for 10 h had its end tried for 19.3 h and given up. Now the
 * waits while it runs are not counted (held on the job), and only they: the end a batch
 * reaches again does not start the 24 h afresh, nor give attempts back.
 */
import { afterEach, describe, expect, it, vi } from "vitest";
import { WEBHOOK_ATTEMPTS } from "../src/shared/queues.js";
import { holdAfterLook, waitBeforeAttempt, webhookBackoffMs } from "../src/shared/webhook-backoff.js";

const HOUR_MS = 3_600_000;
const DAY_MS = 24 * HOUR_MS;
const QUEUED_AT = 1_700_000_000_000;

/**
 * A delivery whose receiver never answers 2xx, driven as the webhook worker drives it: each
 * attempt looks at the batch first (running between `ranFrom` and `ranUntil`: the job is
 * looked at again every 10 s, no attempt spent; ended: held waits counted, then maybe a wait
 * for the last attempt's time), sends, fails, and is delayed by the backoff. Returns the time
 * of each send from the first queueing, and how long the delivery saw its batch running (from
 * the first look that found it running to the one that found it ended: the batch may have run
 * a retry's delay before that first look).
 */
function sends(retryBaseMs: number, ranFrom: number, ranUntil: number): { times: number[]; held: number } {
  let now = QUEUED_AT;
  let data: Record<string, unknown> = { batchId: "b" };
  let attemptsMade = 0;
  let held = 0;
  const times: number[] = [];
  for (let guard = 0; guard < 100_000 && attemptsMade < WEBHOOK_ATTEMPTS; guard++) {
    const running = now - QUEUED_AT >= ranFrom && now - QUEUED_AT < ranUntil;
    data = { ...data, ...holdAfterLook(data, running, now) };
    if (running) {
      now += 10_000;
      held += 10_000;
      continue;
    }
    const job = { timestamp: QUEUED_AT, stalledCounter: 0, opts: { attempts: WEBHOOK_ATTEMPTS }, data };
    const wait = waitBeforeAttempt(job, attemptsMade + 1, now);
    if (wait > 0) {
      now += wait;
      continue;
    }
    times.push(now - QUEUED_AT);
    attemptsMade++;
    if (attemptsMade < WEBHOOK_ATTEMPTS) now += webhookBackoffMs({ retryBaseMs }, attemptsMade, job, now);
  }
  return { times, held };
}

/** How long the delivery was tried: its last send's time less the time it saw its batch run again. */
const triedFor = ({ times, held }: { times: number[]; held: number }) => times.at(-1)! - held;

describe("a webhook whose batch ran again for a day", () => {
  afterEach(() => {
    vi.restoreAllMocks();
  });

  it("is tried for at least 24 h, the time its batch ran not counted", () => {
    vi.spyOn(Math, "random").mockReturnValue(0);
    // A short first retry: the last attempt waits for the day. Ran again from 2 h to 12 h:
    // before, those 10 h counted in the day, and the end was tried for about 19 h in all.
    for (const base of [10, 100]) {
      const delivery = sends(base, 2 * HOUR_MS, 12 * HOUR_MS);
      expect(delivery.times).toHaveLength(WEBHOOK_ATTEMPTS);
      expect(triedFor(delivery), `base ${base} ms, ran early`).toBeGreaterThanOrEqual(DAY_MS);
    }
    // Ran again 20 h after its end, for 24 h: before, its last sends came 3 h after the re-end.
    for (const base of [10, 1_000]) {
      const delivery = sends(base, 20 * HOUR_MS, 44 * HOUR_MS);
      expect(delivery.times).toHaveLength(WEBHOOK_ATTEMPTS);
      expect(delivery.held).toBeGreaterThanOrEqual(20 * HOUR_MS);
      expect(triedFor(delivery), `base ${base} ms`).toBeGreaterThanOrEqual(DAY_MS);
    }
  });

  it("holds its last attempt, due while the batch ran, until it was tried for 24 h", () => {
    vi.spyOn(Math, "random").mockReturnValue(0);
    // From 10 ms the 40th attempt waits for 24 h, and the batch ran from 23 h to 48 h: it is
    // sent once the batch has ended again, and not before a day of tries.
    const delivery = sends(10, 23 * HOUR_MS, 48 * HOUR_MS);
    expect(delivery.times.at(-1)!).toBeGreaterThanOrEqual(48 * HOUR_MS);
    expect(triedFor(delivery)).toBeGreaterThanOrEqual(DAY_MS);
  });

  it("does not start its 24 h afresh at the re-end, nor get new attempts", () => {
    vi.spyOn(Math, "random").mockReturnValue(0);
    const ran = 2 * HOUR_MS;
    const { times } = sends(1_000, 20 * HOUR_MS, 20 * HOUR_MS + ran);
    expect(times).toHaveLength(WEBHOOK_ATTEMPTS);
    // 1 s doubling spans ~25.3 h at the jitter's lowest: the hold only moves it by its 2 h.
    const without = sends(1_000, 0, 0).times;
    expect(times.at(-1)! - without.at(-1)!).toBeLessThanOrEqual(ran + 10_000);
  });
});
