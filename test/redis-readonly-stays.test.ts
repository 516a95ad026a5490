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
import { createRedis, readonlyReconnect } from "../src/shared/redis.js";
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

  it("resends for 5 s of READONLY answers (a failover's), then refuses; a new failover after 10 s of quiet", () => {
    let now = 1_000_000;
    const decide = readonlyReconnect(() => now);
    const readonly = new Error("READONLY You can't write against a read only replica.");
    expect(decide(new Error("ERR other"))).toBe(false);
    const seen: (false | 1 | 2)[] = [];
    for (const at of [0, 100, 4_999, 5_000, 9_000]) {
      now = 1_000_000 + at;
      seen.push(decide(readonly));
    }
    expect(seen).toEqual([2, 2, 2, 1, 1]);
    now += 10_001;
    expect(decide(readonly)).toBe(2);
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
      // Sent again for a while (a failover's window: it reconnected, more than once), then
      // refused rather than sent again for ever ("no answer" above).
      const firstReconnects = reconnects;
      const firstMs = Date.now() - started;
      expect(outcome, role).toMatch(/^READONLY/);
      expect(firstReconnects, role).toBeGreaterThan(1);
      expect(firstReconnects, role).toBeLessThan(100);
      // Once refused, a write is refused at the first READONLY: one reconnect, not sent again.
      const again = Date.now();
      await expect(redis.set("k", "v")).rejects.toThrow(/^READONLY/);
      const secondMs = Date.now() - again;
      expect(reconnects - firstReconnects, role).toBeLessThanOrEqual(1);
      console.log(
        `${role}: first write refused after ${firstMs} ms and ${firstReconnects} reconnects; ` +
          `the next after ${secondMs} ms and ${reconnects - firstReconnects}`,
      );
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
