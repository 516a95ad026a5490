/**
 * A master of a Redis Cluster with replicas fails, as on ElastiCache or Memorystore: the
 * master holding a key's slot is SIGKILLed and its replica is promoted after the node timeout
 * (2 s here; Redis's default is 15 s). A worker's connection waits for the promoted replica,
 * as it waits for a single Redis that restarts; before, its command failed after ioredis's 16
 * redirections (about 1.6 s) with `Too many Cluster redirections`, so during a failover every
 * lease renewal, event write and BullMQ job move of every worker failed and was logged
 * (bench/failover.ts shows the whole fleet: `npm run bench:failover -- --scenario kill`).
 */
import type { Redis } from "ioredis";
import { afterAll, beforeAll, expect, it } from "vitest";
import { closeRedis, createRedis } from "../../src/shared/redis.js";
import { isConnectionError } from "../../src/shared/redis-outage.js";
import { type RedisHandle, startRedisCluster } from "../support/redis-cluster.js";

let cluster: RedisHandle;
let worker: Redis;
let producer: Redis;
const key = "{h6failover}:probe";
/** The master the first test kills: its slots have no replica left afterwards. */
let killed = 0;

beforeAll(async () => {
  cluster = await startRedisCluster(3, 1);
  worker = createRedis(cluster.url, "worker");
  producer = createRedis(cluster.url, "producer");
}, 90_000);
afterAll(async () => {
  if (worker) await closeRedis(worker);
  if (producer) await closeRedis(producer);
  await cluster?.stop();
});

/** The port of the master serving `key`'s slot (CLUSTER SLOTS). */
async function masterOf(redis: Redis, name: string): Promise<number> {
  const slot = Number(await redis.call("CLUSTER", "KEYSLOT", name));
  const slots = (await redis.call("CLUSTER", "SLOTS")) as [number, number, [string, number]][];
  return Number(slots.find(([from, to]) => slot >= from && slot <= to)![2][1]);
}

it("a worker's write while the master of its slot fails over waits for the promoted replica", async () => {
  expect(await worker.set(key, "before")).toBe("OK");
  expect(await producer.get(key)).toBe("before");
  const master = await masterOf(worker, key);
  killed = master;
  cluster.signal(master, "SIGKILL");
  // Sent at once: the master is gone, the cluster marks it failed after the node timeout and
  // promotes its replica; the write waits through all of it.
  expect(await worker.set(key, "after")).toBe("OK");
  expect(await worker.get(key)).toBe("after");
  // The replica took over the slot: the key (written before the kill) was replicated there.
  // CLUSTER SLOTS is answered by whichever node the client asks, and a node learns of the
  // promotion by gossip, a moment after the promoted replica took the write: asked again
  // until its view has it (the ci5 run read the old master from a node not yet told).
  let serving = await masterOf(worker, key);
  for (const until = Date.now() + 15_000; serving === master && Date.now() < until; ) {
    await new Promise((resolve) => setTimeout(resolve, 100));
    serving = await masterOf(worker, key);
  }
  expect(serving).not.toBe(master);
}, 60_000);

it("running out of redirections is a connection error (one outage warning, not one per command)", () => {
  for (const last of [
    "Error: Connection is closed.",
    "ReplyError: MOVED 2638 127.0.0.1:7611",
    "ReplyError: CLUSTERDOWN",
  ])
    expect(isConnectionError(new Error(`Too many Cluster redirections. Last error: ${last}`))).toBe(true);
});

it("a worker's write while the master of its slot hangs goes to the promoted replica without waiting for it", async () => {
  // A key on a master that still has its replica (not the one the first test killed).
  let frozenKey = "";
  for (let i = 0; !frozenKey; i++)
    if ((await masterOf(worker, `{h6frozen${i}}:probe`)) !== killed) frozenKey = `{h6frozen${i}}:probe`;
  expect(await worker.set(frozenKey, "before")).toBe("OK");
  const master = await masterOf(worker, frozenKey);
  cluster.signal(master, "SIGSTOP");
  try {
    // The frozen master keeps its socket open and answers nothing; its replica is promoted
    // after the node timeout. The write waits for no answer until the socket timeout drops
    // that connection, then follows the new slot map to the promoted replica.
    expect(await worker.set(frozenKey, "while frozen")).toBe("OK");
    expect(await masterOf(worker, frozenKey)).not.toBe(master);
  } finally {
    cluster.signal(master, "SIGCONT");
  }
  expect(await worker.get(frozenKey)).toBe("while frozen");
}, 60_000);
