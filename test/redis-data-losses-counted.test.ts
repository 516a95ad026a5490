/**
 * `fleet_redis_data_losses_total`: each sweeper counts once every loss of Redis's data it saw
 * (its marker key gone or changed: redis-data-loss.ts), so an alert can fire and the dashboard
 * show it; before, only a log line said so. A fleet with no running run looked for no loss at
 * all: a FLUSHALL on an idle fleet (the queued jobs lost, the event streams gone) was not seen
 * when it happened, only at the first tick that found a running run, maybe hours later.
 * On a private redis-server (a FLUSHALL of the shared one would empty every other test's data).
 */
import type { ChildProcess } from "node:child_process";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { SessionLease } from "../src/shared/lease.js";
import { createMetrics, type FleetMetrics } from "../src/shared/metrics.js";
import { RunQueues } from "../src/shared/queues.js";
import { createFleetEnv, type FleetEnv } from "./support/fleet-env.js";
import { freePort, startRedis, stopRedis } from "./support/private-redis.js";
import { sweeperOf, withFrozenWorkersRun } from "./support/stalled-run.js";

async function losses(metrics: FleetMetrics): Promise<number> {
  const metric = (await metrics.registry.getMetricsAsJSON()).find(
    (m) => m.name === "fleet_redis_data_losses_total",
  );
  return metric?.values[0]?.value ?? Number.NaN;
}

describe("fleet_redis_data_losses_total", () => {
  let server: ChildProcess;
  let fleet: FleetEnv;
  let queues: RunQueues;

  beforeAll(async () => {
    const port = await freePort();
    server = await startRedis(port);
    fleet = await createFleetEnv("redislosses", { redisUrl: `redis://127.0.0.1:${port}` });
    queues = new RunQueues(fleet.redis, fleet.config.prefix);
  });
  afterAll(async () => {
    await queues?.close();
    await fleet?.close();
    if (server) await stopRedis(server);
  });

  it("starts at 0 on every role, so the first loss is a jump rate() sees", async () => {
    for (const role of ["api", "worker", "sweeper"]) expect(await losses(createMetrics(role))).toBe(0);
  });

  // First: the next test leaves a run running.
  it("sees a loss on an idle fleet when it happens, not at the next running run", async () => {
    const metrics = createMetrics("sweeper");
    const sweeper = sweeperOf(fleet, queues, { metrics });
    expect(await sweeper.sweepAbandoned()).toBe(0);
    expect(await fleet.redis.flushall()).toBe("OK");
    expect(await sweeper.sweepAbandoned()).toBe(0);
    expect(await losses(metrics)).toBe(1);
    expect(await sweeper.sweepAbandoned()).toBe(0);
    expect(await losses(metrics)).toBe(1);
  });

  it("counts each loss once per sweeper that saw it, while runs are running", async () => {
    const metrics = [createMetrics("sweeper"), createMetrics("sweeper")];
    const sweepers = metrics.map((m) => sweeperOf(fleet, queues, { metrics: m }));
    const lease = new SessionLease(fleet.redis, fleet.config.prefix, fleet.config.leaseTtlMs);
    await withFrozenWorkersRun(fleet, async ({ sessionId, workerId }) => {
      // Held, so the sweepers leave the run alone whatever they judge.
      const hold = async () => expect(await lease.acquire(sessionId, workerId)).not.toBeNull();
      await hold();
      for (const sweeper of sweepers) expect(await sweeper.sweepAbandoned()).toBe(0);
      for (const sweeper of sweepers) expect(await sweeper.sweepAbandoned()).toBe(0);
      expect(await Promise.all(metrics.map(losses))).toEqual([0, 0]);

      expect(await fleet.redis.flushall()).toBe("OK");
      await hold();
      for (const sweeper of sweepers) expect(await sweeper.sweepAbandoned()).toBe(0);
      // Both saw it (the second finds the marker the first wrote anew); looking again counts nothing.
      expect(await Promise.all(metrics.map(losses))).toEqual([1, 1]);
      for (const sweeper of sweepers) expect(await sweeper.sweepAbandoned()).toBe(0);
      expect(await Promise.all(metrics.map(losses))).toEqual([1, 1]);

      expect(await fleet.redis.flushall()).toBe("OK");
      await hold();
      for (const sweeper of sweepers) expect(await sweeper.sweepAbandoned()).toBe(0);
      expect(await Promise.all(metrics.map(losses))).toEqual([2, 2]);
    });
  });
});
