/**
 * The pure decisions behind a batch stream's check against Postgres
 * (src/producer/batch-stream-check.ts) and a webhook job's re-queue after a restore
 * (src/sweeper/webhook-owed.ts). The live cases: test/batch-events-restore.test.ts and
 * test/webhooks.test.ts.
 */
import { describe, expect, it } from "vitest";
import {
  BATCH_MEMBER,
  contradicted,
  runsNamed,
  sessionFingerprint,
} from "../src/producer/batch-stream-check.js";
import { webhookJobAction } from "../src/sweeper/webhook-owed.js";

describe("batch stream fingerprints", () => {
  const page: [string, string][] = [
    ["s1", sessionFingerprint("r1")],
    ["s2", sessionFingerprint(null)],
    [BATCH_MEMBER, "2026-12-03T10:00:00.000Z"],
  ];

  it("names the runs of session ends, not a session without runs nor the batch's end", () => {
    expect(runsNamed(page)).toEqual([["s1", "r1"]]);
  });

  it("is contradicted by a run Postgres does not have, or another ended_at (null: running again)", () => {
    const endedAt = "2026-12-03T10:00:00.000Z";
    expect(contradicted(page, { endedAt, missingRuns: new Set() })).toBeNull();
    expect(contradicted(page, { endedAt, missingRuns: new Set(["r1"]) })).toEqual(["s1", "run:r1"]);
    expect(contradicted(page, { endedAt: null, missingRuns: new Set() })).toEqual([BATCH_MEMBER, endedAt]);
    expect(contradicted(page, { endedAt: "2026-12-03T11:00:00.000Z", missingRuns: new Set() })?.[0]).toBe(
      BATCH_MEMBER,
    );
  });
});

describe("a webhook job found under a batch's id", () => {
  const now = 1_000_000;
  it("is queued when missing, left while it may still deliver, re-queued when finished and still owed", () => {
    expect(webhookJobAction(null, now)).toBe("queue");
    expect(webhookJobAction({ state: "unknown" }, now)).toBe("queue");
    for (const state of ["waiting", "delayed", "active", "prioritized", "waiting-children"])
      expect(webhookJobAction({ state }, now), state).toBe("leave");
    expect(webhookJobAction({ state: "completed", finishedOn: now }, now)).toBe("requeue-if-owed");
    // A last failure's give-up is recorded just after it: not taken for a lost timeline at once.
    expect(webhookJobAction({ state: "failed", finishedOn: now - 1_000 }, now)).toBe("leave");
    expect(webhookJobAction({ state: "failed", finishedOn: now - 61_000 }, now)).toBe("requeue-if-owed");
    // One that spent the webhook's attempts: its give-up recorded, not 40 attempts more.
    expect(webhookJobAction({ state: "failed", finishedOn: now - 1_000, attemptsSpent: true }, now)).toBe(
      "leave",
    );
    expect(webhookJobAction({ state: "failed", finishedOn: now - 61_000, attemptsSpent: true }, now)).toBe(
      "record-failed-if-owed",
    );
    // One whose receiver took it (kept on the job): recorded delivered, spent or not.
    for (const attemptsSpent of [true, false])
      expect(
        webhookJobAction(
          { state: "failed", finishedOn: now - 61_000, attemptsSpent, receiverTookIt: true },
          now,
        ),
      ).toBe("record-delivered-if-owed");
  });
});
