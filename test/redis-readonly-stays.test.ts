/**
 * A Redis that stays read-only: REDIS_URL names a replica (a mistake), or a failover's address
 * keeps leading to the old primary. A connection that meets READONLY reconnects and sends the
 * command again (redis-failover.test.ts), but it did so without end: every write of the fleet
 * hung, the connection reconnecting about ten times a second, and the API never answered.
 * The command is sent again for a few seconds (a failover's), then refused with the READONLY
 * error, which the API answers as it does any Redis refusing work.
 */
import type { ChildProcess } from "node:child_process";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import type { FleetClient } from "../src/producer/client.js";
import { createRedis } from "../src/shared/redis.js";
import { createFleetEnv, type FleetEnv } from "./support/fleet-env.js";
import { freePort, startRedis, stopRedis } from "./support/private-redis.js";

const agent = { model: { provider: "scripted" as const, steps: [{ text: "done" }] } };

describe("a Redis that stays read-only", () => {
  let primary: ChildProcess;
  let replica: ChildProcess;
  let replicaUrl: string;

  beforeAll(async () => {
    const [primaryPort, replicaPort] = [await freePort(), await freePort()];
    primary = await startRedis(primaryPort);
    replica = await startRedis(replicaPort, ["--replicaof", "127.0.0.1", String(primaryPort)]);
    replicaUrl = `redis://127.0.0.1:${replicaPort}`;
  });
  afterAll(async () => {
    for (const server of [replica, primary]) if (server) await stopRedis(server);
  });

  it("refuses a write with READONLY after a few seconds, for producers and workers alike", async () => {
    for (const role of ["producer", "worker"] as const) {
      const redis = createRedis(replicaUrl, role);
      let reconnects = 0;
      redis.on("reconnecting", () => reconnects++);
      const started = Date.now();
      const outcome = await Promise.race([
        redis.set("k", "v").then(
          () => "written",
          (error: Error) => error.message,
        ),
        new Promise((resolve) => setTimeout(() => resolve("no answer"), 15_000)),
      ]);
      expect(outcome, role).toMatch(/^READONLY/);
      expect(Date.now() - started).toBeLessThan(10_000);
      // Once refused, a write is refused at once (and reconnects once, not again and again).
      const again = Date.now();
      await expect(redis.set("k", "v")).rejects.toThrow(/^READONLY/);
      expect(Date.now() - again).toBeLessThan(1_000);
      expect(reconnects).toBeLessThan(100);
      redis.disconnect();
    }
  }, 60_000);

  it("the API answers input stored meanwhile (202) instead of never", async () => {
    let fleet: FleetEnv | undefined;
    try {
      fleet = await createFleetEnv("redisreadonly", { redisUrl: replicaUrl });
      const { client }: { client: FleetClient } = await fleet.startApi();
      const { id } = await client.createSession({ agent });
      const sent = await Promise.race([
        client.send(id, "hello"),
        new Promise((resolve) => setTimeout(() => resolve("no answer"), 20_000)),
      ]);
      expect(sent).toEqual({ runId: expect.any(String) });
    } finally {
      await fleet?.close();
    }
  }, 60_000);
});
