/**
 * `fleet worker`'s exit deadline against its stop's own bound. SIGTERM with a job running and
 * Redis away: the stop waits the grace period, then at most STOP_WAIT_MS for the running job
 * and BullMQ's close, then closes its connections. The deadline was SHUTDOWN_GRACE_MS + 10 s,
 * shorter than that wait: it fired first, cut the clean close short and exited 1 ("worker not
 * stopped 10 s after the signal"). It is now derived from the same constant (shutdown.ts
 * exitDeadlineMs), past the stop's bound, and the stop ends by its own path.
 */

import { afterAll, describe, expect, it } from "vitest";
import {
  exitDeadlineMs,
  STOP_CLOSE_MS,
  STOP_WAIT_MS,
  STOP_WAITS,
  supervisorStopMs,
} from "../src/shared/shutdown.js";
import { exitedWithOutput } from "./support/child-exit.js";
import type { FleetEnv } from "./support/fleet-env.js";
import { startRedis, stopRedis } from "./support/private-redis.js";
import { type PrivateRedisFleet, startPrivateRedisFleet } from "./support/private-redis-fleet.js";
import { waitForToolCall } from "./support/tool-call-stored.js";

describe("a role's exit deadline", () => {
  it("is its grace period, its stop's waits of STOP_WAIT_MS and its closes", () => {
    expect(exitDeadlineMs("worker", 500)).toBe(500 + STOP_WAIT_MS + STOP_CLOSE_MS);
    expect(exitDeadlineMs("worker", 10_000)).toBe(10_000 + STOP_WAITS.worker * STOP_WAIT_MS + STOP_CLOSE_MS);
    // Only the worker has a grace period.
    expect(exitDeadlineMs("sweeper", 10_000)).toBe(STOP_WAITS.sweeper * STOP_WAIT_MS + STOP_CLOSE_MS);
    expect(exitDeadlineMs("api", 10_000)).toBe(STOP_CLOSE_MS);
  });

  it("ends after the stop's last wait has given up, with time left to close", () => {
    for (const grace of [0, 500, 10_000, 60_000]) {
      expect(exitDeadlineMs("worker", grace) - (grace + STOP_WAIT_MS)).toBeGreaterThanOrEqual(5_000);
      // The sweeper waits one STOP_WAIT_MS in all: its webhook Worker, passes and retention together.
      expect(exitDeadlineMs("sweeper", grace) - STOP_WAIT_MS).toBeGreaterThanOrEqual(5_000);
    }
  });

  it("fleet up kills a child only past that child's own deadline", () => {
    for (const grace of [0, 500, 10_000, 60_000])
      for (const role of ["api", "worker", "sweeper"] as const)
        expect(supervisorStopMs(grace)).toBeGreaterThan(exitDeadlineMs(role, grace));
  });
});

describe("fleet worker stopped with a job running and Redis away", () => {
  let started: PrivateRedisFleet | undefined;
  let fleet: FleetEnv | undefined;
  afterAll(async () => {
    // The fleet's own close talks to Redis: it is started again for it.
    if (!started || !fleet) return;
    const back = await startRedis(started.port);
    await started.sweeper.stop();
    await started.api.stop();
    await fleet.close();
    await stopRedis(back);
  }, 90_000);

  it("exits 0 by its stop's own path (the wait gives up, the connections close), not by the deadline", async () => {
    started = await startPrivateRedisFleet("exitdeadline");
    fleet = started.fleet;
    const { client } = started;
    // At info: its "worker stopped" line is the stop's own end.
    const worker = await fleet.spawnWorker({ SHUTDOWN_GRACE_MS: "500", LOG_LEVEL: "info" });
    const { id } = await client.createSession({
      agent: {
        model: {
          provider: "scripted",
          steps: [{ toolCalls: [{ name: "sleep", arguments: { ms: 60_000 } }] }],
        },
        tools: ["sleep"],
      },
    });
    await client.send(id, "sleep a while");
    await waitForToolCall(client, id, "sleep", 30_000);
    await stopRedis(started.redis);
    worker.child.kill("SIGTERM");
    // Bounded by the deadline itself (21.5 s here); its output read to the end.
    const code = await exitedWithOutput(worker.child);
    const output = worker.output();
    expect(output).not.toContain("worker not stopped");
    expect(output).toContain("a running job did not end (Redis away?); stopping without it");
    expect(output).toContain('"msg":"worker stopped"');
    expect(code, output).toBe(0);
  }, 120_000);
});
