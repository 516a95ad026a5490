/**
 * A lease missing right after Redis was away says nothing: the worker's renewals may not
 * have landed yet, and a live worker takes its lease back (lease-keeper.ts). The sweeper
 * judges a missing lease (`stalled`) only once Redis has answered it well for a whole TTL
 * since its last failure, slow answer or reconnect. A dead worker is still found at once.
 */
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { SessionLease } from "../src/shared/lease.js";
import { RunQueues } from "../src/shared/queues.js";
import { leaseJudgeable, slowAnswer } from "../src/sweeper/sweeper.js";
import { createFleetEnv, type FleetEnv } from "./support/fleet-env.js";
import { sweeperOf, withFrozenWorkersRun } from "./support/stalled-run.js";

describe("the sweeper after Redis trouble", () => {
  let fleet: FleetEnv;
  let queues: RunQueues;

  beforeAll(async () => {
    fleet = await createFleetEnv("sweepertrouble");
    queues = new RunQueues(fleet.redis, fleet.config.prefix);
  });
  afterAll(async () => {
    await queues?.close();
    await fleet?.close();
  });

  it("pure rules: a slow answer is one later than a renewal period; judge after a whole TTL", () => {
    expect([slowAnswer(666, 2_000), slowAnswer(667, 2_000)]).toEqual([false, true]);
    expect([leaseJudgeable(1_999, 2_000), leaseJudgeable(2_000, 2_000)]).toEqual([false, true]);
    expect(leaseJudgeable(Number.POSITIVE_INFINITY, 2_000)).toBe(true);
  });

  it("leaves a missing lease alone until Redis answered well for a TTL, then ends the run stalled", async () => {
    const clock = { now: Date.now() };
    const ttl = fleet.config.leaseTtlMs;
    const sweeper = sweeperOf(fleet, queues, { now: () => clock.now });
    // A live worker (its connection is listed) whose run has no lease: Redis just came back.
    await withFrozenWorkersRun(fleet, async ({ sessionId, runStatus }) => {
      sweeper.resetLiveness(); // what sweeper-process does when its connection is ready again
      expect(await sweeper.sweepAbandoned()).toBe(0);
      clock.now += ttl - 1;
      expect(await sweeper.sweepAbandoned()).toBe(0);
      expect((await runStatus()).status).toBe("running");
      // Still nobody took the lease back after a whole TTL of good answers: frozen.
      clock.now += 1;
      expect(await sweeper.sweepAbandoned()).toBe(1);
      expect(await runStatus()).toEqual({ status: "ended", ended_reason: "stalled" });
      // The sweeper held the lease only while it ended the run.
      expect(await new SessionLease(fleet.redis, fleet.config.prefix, ttl).holder(sessionId)).toBeNull();
    });
  });
});
