/**
 * A sweeper stopped while its Redis is away (`startSweeper().stop()`, as an embedding process
 * or a test's teardown calls it): the stop ends. Before, it waited for the webhook Worker's
 * `close()`, which BullMQ never resolves while Redis is away (taskforcesh/bullmq#4656), so it
 * hung until Redis came back (infra-faults' teardown once ran past vitest's 30 s limit, its
 * worker children left running). Now that wait is bounded (WEBHOOK_CLOSE_MS) and the rest of
 * the stop goes on. `fleet sweeper` itself was already bounded by its exit deadline.
 */
import { afterAll, describe, expect, it } from "vitest";
import type { FleetEnv } from "./support/fleet-env.js";
import { startRedis, stopRedis } from "./support/private-redis.js";
import { startPrivateRedisFleet } from "./support/private-redis-fleet.js";

describe("a sweeper stopped while Redis is away", () => {
  let fleet: FleetEnv | undefined;
  let port = 0;
  afterAll(async () => {
    // The fleet's own close talks to Redis: it is started again for it.
    if (!fleet) return;
    const back = await startRedis(port);
    await fleet.close();
    await stopRedis(back);
  });

  it("ends its stop without waiting for Redis to come back", async () => {
    const started = await startPrivateRedisFleet("sweepaway");
    ({ fleet, port } = started);
    await new Promise((resolve) => setTimeout(resolve, 1_000));
    await stopRedis(started.redis);
    await new Promise((resolve) => setTimeout(resolve, 1_000));
    let timer: NodeJS.Timeout | undefined;
    const outcome = await Promise.race([
      started.sweeper.stop().then(() => "stopped" as const),
      new Promise<"still waiting">((resolve) => {
        timer = setTimeout(() => resolve("still waiting"), 25_000);
      }),
    ]);
    clearTimeout(timer);
    await started.api.stop();
    expect(outcome).toBe("stopped");
  }, 60_000);
});
