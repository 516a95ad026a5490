/**
 * Contracts §9: a webhook is "retried with backoff until a 2xx, for at least 24 h". The 40
 * attempts' delays double from FLEET_WEBHOOK_RETRY_MS up to an hour: from the default 1 s
 * they span about 28 h, but an operator who shortens the first retry (100 ms, 10 ms) spent
 * more of the 40 on the doubling and the last attempt came after 24.8 h, 21.5 h — less with
 * the jitter's −10 %: a receiver down for 23 h lost the batch's end.
 */
import { afterEach, describe, expect, it, vi } from "vitest";
import { WEBHOOK_ATTEMPTS, WEBHOOK_MAX_STALLS } from "../src/shared/queues.js";
import { webhookBackoffMs } from "../src/shared/webhooks.js";

const DAY_MS = 24 * 3_600_000;

/** When the last of `attempts` comes after the first, each retry delayed as the worker's strategy delays it. */
function span(
  retryBaseMs: number,
  attempts = WEBHOOK_ATTEMPTS,
  stalls: (attemptsMade: number) => number = () => 0,
) {
  const queuedAt = 1_700_000_000_000;
  let now = queuedAt;
  let attemptsMade = 1;
  // Each failed attempt's retry (BullMQ passes the failures so far, this one included); stalls
  // (a resend after its sweeper died) are attempts too, without a backoff of their own.
  while (attemptsMade + stalls(attemptsMade) < attempts) {
    const job = { timestamp: queuedAt, stalledCounter: stalls(attemptsMade), opts: { attempts } };
    now += webhookBackoffMs({ retryBaseMs }, attemptsMade, job, now);
    attemptsMade++;
  }
  return now - queuedAt;
}

describe("a webhook's 40 attempts", () => {
  afterEach(() => {
    vi.restoreAllMocks();
  });

  it("span at least 24 h whatever FLEET_WEBHOOK_RETRY_MS, the jitter at its lowest", () => {
    vi.spyOn(Math, "random").mockReturnValue(0);
    for (const base of [10, 100, 250, 1_000, 60_000])
      expect(span(base), `base ${base} ms`).toBeGreaterThanOrEqual(DAY_MS);
    // Stalls take attempts too: the last is still at least 24 h after the first.
    expect(span(10, WEBHOOK_ATTEMPTS, () => WEBHOOK_MAX_STALLS)).toBeGreaterThanOrEqual(DAY_MS);
  });

  it("keep the early retries as FLEET_WEBHOOK_RETRY_MS sets them, and no retry waits past 24 h", () => {
    vi.spyOn(Math, "random").mockReturnValue(0.5);
    const job = { timestamp: 0, stalledCounter: 0, opts: { attempts: WEBHOOK_ATTEMPTS } };
    expect(webhookBackoffMs({ retryBaseMs: 10 }, 1, job, 10)).toBe(10);
    expect(webhookBackoffMs({ retryBaseMs: 10 }, 5, job, 1_000)).toBe(160);
    expect(webhookBackoffMs({ retryBaseMs: 1_000 }, 20, job, 3_600_000)).toBe(3_600_000);
    // The retry before the last attempt waits for the rest of the 24 h, and no more.
    expect(webhookBackoffMs({ retryBaseMs: 10 }, WEBHOOK_ATTEMPTS - 1, job, DAY_MS - 5 * 3_600_000)).toBe(
      5 * 3_600_000,
    );
    expect(webhookBackoffMs({ retryBaseMs: 10 }, WEBHOOK_ATTEMPTS - 1, job, DAY_MS + 5)).toBe(3_600_000);
    // A job queued by hand with fewer attempts (tests, an operator's retry) is not held for a day.
    const short = { timestamp: 0, stalledCounter: 0, opts: { attempts: 2 } };
    expect(webhookBackoffMs({ retryBaseMs: 10 }, 1, short, 10)).toBe(10);
  });
});
