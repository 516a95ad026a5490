/**
 * The sweeper decides that a frozen worker's lease expired from how long its run has been
 * running. The run's start is Postgres's clock; the age must be too, not the sweeper host's
 * clock: a sweeper 10 minutes behind Postgres left a frozen worker's sessions alone for 10
 * minutes (and one ahead could take a run that just started for an old one).
 */
import { afterAll, beforeAll, describe, expect, it, vi } from "vitest";
import { RunQueues } from "../src/shared/queues.js";
import { createFleetEnv, type FleetEnv } from "./support/fleet-env.js";
import { sweeperOf, withFrozenWorkersRun } from "./support/stalled-run.js";

describe("the sweeper and clocks", () => {
  let fleet: FleetEnv;
  let queues: RunQueues;

  beforeAll(async () => {
    fleet = await createFleetEnv("sweeperclock");
    queues = new RunQueues(fleet.redis, fleet.config.prefix);
  });
  afterAll(async () => {
    await queues?.close();
    await fleet?.close();
  });

  it("ends a frozen worker's run once its lease is gone, whatever the sweeper host's clock says", async () => {
    const tenMinutes = 10 * 60_000;
    // This host's clock is 10 minutes behind Postgres's.
    const sweeper = sweeperOf(fleet, queues, { now: () => Date.now() - tenMinutes });
    // A frozen worker: its connection is listed (alive), its lease lapsed long ago.
    await withFrozenWorkersRun(fleet, async ({ runStatus }) => {
      expect(await sweeper.sweepAbandoned()).toBe(1);
      expect(await runStatus()).toEqual({ status: "ended", ended_reason: "stalled" });
    });
  });

  it("judges leases again a lease TTL after Redis trouble even when this host's clock steps back", async () => {
    // Durations are measured on a monotonic clock: an NTP step of the wall clock an hour back
    // right after Redis trouble left every missing lease unjudged (frozen workers' sessions not
    // resumed) for that hour, since `now - troubleAt` stayed below the TTL.
    // Only Date is faked (it goes on ticking): the wall clock this host's NTP could step.
    vi.useFakeTimers({ toFake: ["Date"], shouldAdvanceTime: true });
    try {
      const sweeper = sweeperOf(fleet, queues);
      sweeper.redisTrouble();
      vi.setSystemTime(Date.now() - 60 * 60_000);
      await withFrozenWorkersRun(fleet, async ({ runStatus }) => {
        const giveUpAt = performance.now() + 4 * fleet.config.leaseTtlMs;
        let ended = 0;
        while (ended === 0 && performance.now() < giveUpAt) {
          ended = await sweeper.sweepAbandoned();
          if (ended === 0) await new Promise((r) => setTimeout(r, 100));
        }
        expect(ended).toBe(1);
        expect(await runStatus()).toEqual({ status: "ended", ended_reason: "stalled" });
      });
    } finally {
      vi.useRealTimers();
    }
  });
});
