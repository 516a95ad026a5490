/**
 * The API's (a producer's) cluster connection while the master of a key's slot hangs (SIGSTOP:
 * the socket stays open and nothing answers, as in a partition that drops packets). Workers
 * and the sweeper got a socket timeout for this (failover.test.ts); the API's connection had
 * none, so a request needing that master waited until it answered again, however long after
 * its replica was promoted. Now its node connection is dropped after
 * PRODUCER_CLUSTER_SOCKET_TIMEOUT_MS without an answer and the command follows the new slot map.
 */
import type { Redis } from "ioredis";
import { afterAll, beforeAll, expect, it } from "vitest";
import { closeRedis, createRedis } from "../../src/shared/redis.js";
import { type RedisHandle, startRedisCluster } from "../support/redis-cluster.js";

let cluster: RedisHandle;
let api: Redis;
const key = "{h5hung}:probe";

beforeAll(async () => {
  cluster = await startRedisCluster(3, 1);
  api = createRedis(cluster.url, "producer");
}, 90_000);
afterAll(async () => {
  if (api) await closeRedis(api);
  await cluster?.stop();
});

/** The port of the master serving `key`'s slot (CLUSTER SLOTS). */
async function masterOf(redis: Redis, name: string): Promise<number> {
  const slot = Number(await redis.call("CLUSTER", "KEYSLOT", name));
  const slots = (await redis.call("CLUSTER", "SLOTS")) as [number, number, [string, number]][];
  return Number(slots.find(([from, to]) => slot >= from && slot <= to)![2][1]);
}

it("an API command while the master of its slot hangs goes to the promoted replica, not held until it answers", async () => {
  expect(await api.set(key, "before")).toBe("OK");
  const master = await masterOf(api, key);
  cluster.signal(master, "SIGSTOP");
  try {
    // The master stays frozen until this write has its answer: without a socket timeout the
    // write waits for the frozen master for ever (the test's timeout).
    expect(await api.set(key, "while frozen")).toBe("OK");
    expect(await masterOf(api, key)).not.toBe(master);
  } finally {
    cluster.signal(master, "SIGCONT");
  }
  expect(await api.get(key)).toBe("while frozen");
}, 60_000);
