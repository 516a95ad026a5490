/**
 * `fleet_runs_total` counts every run once, by whoever ends it, once the end is stored
 * (README "Metrics and dashboard"). The sweeper ends a frozen or dead worker's run while it
 * holds the session's lease, and releases that lease after. When the release failed (Redis
 * went away right then), the run was ended in Postgres but never counted: the count came
 * after the release, and the next sweeps see an ended run (part 2 resumes the session, but
 * counts no run). Here the sweeper's release of its own lease fails once.
 */
import pino from "pino";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { SessionLease } from "../src/shared/lease.js";
import { createMetrics } from "../src/shared/metrics.js";
import { RunQueues } from "../src/shared/queues.js";
import { DEFAULT_RESUME_POLICY } from "../src/shared/resume-policy.js";
import { AutomaticResumes } from "../src/shared/store/automatic-resumes.js";
import { SessionQueries } from "../src/shared/store/session-queries.js";
import { SweepQueries } from "../src/sweeper/sweep-queries.js";
import { Sweeper } from "../src/sweeper/sweeper.js";
import { createFleetEnv, type FleetEnv } from "./support/fleet-env.js";
import { withFrozenWorkersRun } from "./support/stalled-run.js";

/** A lease whose release of the sweeper's own token fails once, as with Redis gone at that moment. */
class FlakyReleaseLease extends SessionLease {
  failed = false;
  override async release(sessionId: string, token: string): Promise<boolean> {
    if (!this.failed && token.startsWith("sweeper")) {
      this.failed = true;
      throw new Error("Connection is closed.");
    }
    return super.release(sessionId, token);
  }
}

describe("a run the sweeper ended while Redis failed its lease's release", () => {
  let fleet: FleetEnv;
  let queues: RunQueues;

  beforeAll(async () => {
    fleet = await createFleetEnv("abandonedcounted");
    queues = new RunQueues(fleet.redis, fleet.config.prefix);
  });
  afterAll(async () => {
    await queues?.close();
    await fleet?.close();
  });

  it("is counted in fleet_runs_total all the same", async () => {
    const metrics = createMetrics("sweeper-test");
    const lease = new FlakyReleaseLease(fleet.redis, fleet.config.prefix, fleet.config.leaseTtlMs);
    const sweeper = new Sweeper(
      {
        prefix: fleet.config.prefix,
        redis: fleet.redis,
        lease,
        queries: new SessionQueries(fleet.database),
        sweeps: new SweepQueries(fleet.database),
        queues,
        metrics,
        resumes: new AutomaticResumes(fleet.database, DEFAULT_RESUME_POLICY, metrics),
        log: pino({ level: "silent" }),
      },
      // Judges the made-up run at once (a sweeper process waits a lease TTL from its start).
      { startGraceMs: 0 },
    );
    await withFrozenWorkersRun(fleet, async ({ runStatus }) => {
      await sweeper.sweepAbandoned();
      expect(lease.failed).toBe(true);
      expect(await runStatus()).toEqual({ status: "ended", ended_reason: "stalled" });
      // The next sweeps find the run ended: nothing counts it later.
      await sweeper.tick();
      const runs = (await metrics.registry.getMetricsAsJSON()).find((m) => m.name === "fleet_runs_total");
      const stalled = runs?.values.find((v) => v.labels.kind === "run" && v.labels.outcome === "stalled");
      expect(stalled?.value).toBe(1);
    });
  });
});
