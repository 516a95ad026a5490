/**
 * What the releases after the cluster suite added, on a real 3-master Redis Cluster of this
 * file's own (test/support/redis-cluster.ts), with a fleet's hash-tagged prefix: every call
 * these features make — multi-key scripts over many sessions' keys, pipelines, pub/sub, and
 * the commands that answer for one server only (SCAN, CONFIG GET) — either finds all its
 * keys in the fleet's slot or asks every master.
 * - session and batch deletion (deletion-cleanup.ts): a chunk of many sessions' streams ended;
 * - event streams: one script call for many sessions' writes, a long write in chunks read back
 *   in order, DROP_SCRIPT, the batch stream check's drop;
 * - provider limits: permits, the waiting sorted set, forget, pause;
 * - fair dispatch's renumbering, whose script rewrites BullMQ job hashes it is not passed;
 * - a webhook job of a lost timeline queued again (webhook-owed.ts);
 * - heartbeats, the tool-name registry;
 * - SCAN (scanKeys/deleteKeys) and CONFIG GET maxmemory-policy (eviction-policy.ts) on every
 *   master, not just the one a command happens to reach.
 */
import { Queue, Worker } from "bullmq";
import { Redis } from "ioredis";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { BATCH_MEMBER, BatchStreamCheck, batchStreamKeys } from "../../src/producer/batch-stream-check.js";
import { FairDispatch } from "../../src/producer/fair-dispatch.js";
import { loadConfig } from "../../src/shared/config.js";
import { DeletionCleanup } from "../../src/shared/deletion-cleanup.js";
import { EventReader } from "../../src/shared/event-reader.js";
import { EventWriter } from "../../src/shared/event-writer.js";
import { eventStreamKey, fingerprint } from "../../src/shared/events.js";
import { readEvictionPolicy, reportEvictionPolicy } from "../../src/shared/eviction-policy.js";
import type { StoredMessage } from "../../src/shared/messages.js";
import { ProviderLimits } from "../../src/shared/provider-limits.js";
import { enqueueWebhook, openWebhookQueue, QUEUES } from "../../src/shared/queues.js";
import { closeRedis, createRedis, deleteKeys, masters, scanKeys } from "../../src/shared/redis.js";
import { readToolNames, registerToolNames } from "../../src/shared/tool-names.js";
import { beat, heartbeats } from "../../src/shared/worker-signals.js";
import { ensureWebhookQueued } from "../../src/sweeper/webhook-owed.js";
import { waitFor } from "../support/fleet-env.js";
import { type RedisHandle, startRedisCluster } from "../support/redis-cluster.js";

let cluster: RedisHandle;
let redis: Redis;
/** The fleet's prefix as config.ts makes it on a cluster: `h1feat` → `{h1feat}`. */
let prefix: string;

beforeAll(async () => {
  cluster = await startRedisCluster(3);
  redis = createRedis(cluster.url, "worker");
  prefix = loadConfig({ REDIS_URL: cluster.url, FLEET_PREFIX: "h1feat" }).prefix;
  expect(prefix).toBe("{h1feat}");
}, 60_000);
afterAll(async () => {
  if (redis) await closeRedis(redis);
  await cluster?.stop();
});

/** The master serving `key` (by CLUSTER KEYSLOT and the slot map). */
async function portOf(key: string): Promise<number> {
  const slot = Number(await redis.call("CLUSTER", "KEYSLOT", key));
  const slots = (await redis.call("CLUSTER", "SLOTS")) as [number, number, [string, number]][];
  const owner = slots.find(([from, to]) => slot >= from && slot <= to)!;
  return Number(owner[2][1]);
}

let createdAt = Date.parse("2026-12-03T10:00:00.000Z");
function message(seq: number, content: string): StoredMessage {
  createdAt += 1;
  return { role: "user", content, seq, createdAt: new Date(createdAt).toISOString() };
}

describe("commands that answer for one server", () => {
  it("SCAN (scanKeys, deleteKeys) sees the keys of every master", async () => {
    // One key on each master: tags chosen until every master holds one.
    const keys = new Map<number, string>();
    for (let i = 0; keys.size < cluster.ports.length; i++) {
      const key = `h1scan:{t${i}}`;
      const port = await portOf(key);
      if (!keys.has(port)) keys.set(port, key);
    }
    for (const key of keys.values()) await redis.set(key, "1");
    // One server's SCAN sees one key: a scan of the node a command happens to reach is not enough.
    const one = new Redis(cluster.ports[0]!, "127.0.0.1");
    try {
      expect((await one.scan("0", "MATCH", "h1scan:*", "COUNT", 1000))[1]).toHaveLength(1);
    } finally {
      one.disconnect();
    }
    expect((await scanKeys(redis, "h1scan:*")).sort()).toEqual([...keys.values()].sort());
    expect(await deleteKeys(redis, "h1scan:*")).toBe(3);
    expect(await scanKeys(redis, "h1scan:*")).toEqual([]);
  });

  it("reads maxmemory-policy on every master: one that is not noeviction is named", async () => {
    const fleetPort = await portOf(`${prefix}:runs`);
    const otherPort = cluster.ports.find((port) => port !== fleetPort)!;
    const other = new Redis(otherPort, "127.0.0.1");
    try {
      await other.config("SET", "maxmemory-policy", "allkeys-lru");
      const reading = await readEvictionPolicy(redis);
      expect(reading).toEqual({ policies: expect.any(Array) });
      expect((reading as { policies: string[] }).policies.sort()).toEqual([
        "allkeys-lru",
        "noeviction",
        "noeviction",
      ]);
      const warnings: string[] = [];
      let gauge = Number.NaN;
      const verdict = await reportEvictionPolicy(
        redis,
        { warn: (line) => warnings.push(line), info: () => {} },
        { set: (value) => (gauge = value) },
      );
      expect(verdict.safe).toBe(0);
      expect(gauge).toBe(0);
      expect(warnings).toHaveLength(1);
      expect(warnings[0]).toMatch(/maxmemory-policy is allkeys-lru, not noeviction/);
    } finally {
      await other.config("SET", "maxmemory-policy", "noeviction");
      other.disconnect();
    }
    expect(await readEvictionPolicy(redis)).toEqual({
      policies: ["noeviction", "noeviction", "noeviction"],
    });
  });
});

describe("event streams", () => {
  it("writes many sessions in one turn, a long write in chunks, and drops a stale stream (DROP_SCRIPT)", async () => {
    const writer = new EventWriter(redis, prefix);
    const reader = new EventReader(redis, prefix);
    const sessions = Array.from({ length: 40 }, (_, i) => `s-many-${i}`);
    // Written in the same turn: they share script calls (all keys in the fleet's slot).
    const results = await Promise.all(
      sessions.map((id) => writer.write(id, [{ runId: "r1", message: message(1, `hi ${id}`) }], [])),
    );
    for (const result of results) expect(result.ok).toBe(true);
    for (const id of sessions) expect(await writer.lastSeq(id)).toBe(1);

    // 300 messages of 1 KB: more than one 128 KB chunk, written in order.
    const long = "s-long";
    const messages = Array.from({ length: 300 }, (_, i) => ({
      runId: "r1",
      message: message(i + 1, `${i}:${"x".repeat(1_000)}`),
    }));
    const written = await writer.write(long, messages, [
      { type: "RUN_COMPLETED", runId: "r1", outcome: "completed" },
    ]);
    expect(written.ok && written.written).toBe(301);
    const read = await reader.from(eventStreamKey(prefix, long), "-", 1_000);
    expect(read.map((e) => (e.data.message as StoredMessage | undefined)?.seq ?? e.type)).toEqual([
      ...messages.map((m) => m.message.seq),
      "RUN_COMPLETED",
    ]);

    // The stream says seq 300; Postgres (restored) has 120 with another message at 120.
    const last = messages.at(-1)!.message;
    const dropped = await writer.dropIfStale(long, 300, fingerprint(last), {
      last: 120,
      fingerprint: fingerprint(message(120, "other")),
    });
    expect(dropped).toBe(true);
    expect(await redis.exists(eventStreamKey(prefix, long))).toBe(0);
    expect(await writer.lastSeq(long)).toBe(0);
  });
});

describe("deletion cleanup", () => {
  it("ends the streams of a chunk of many sessions and a batch's stream, and wakes readers", async () => {
    const writer = new EventWriter(redis, prefix);
    const sessions = Array.from({ length: 250 }, (_, i) => `s-del-${i}`);
    await Promise.all(sessions.map((id) => writer.write(id, [{ runId: "r", message: message(1, id) }], [])));
    const batch = batchStreamKeys(prefix, "b-del");
    await redis.xadd(batch.stream, "*", "type", "SESSION_ENDED", "data", "{}");
    await redis.hset(batch.fingerprints, BATCH_MEMBER, "");
    await redis.set(batch.done, "1");

    // A reader subscribed on a master that holds none of the fleet's keys still hears them.
    const fleetPort = await portOf(`${prefix}:events-notify`);
    const subscriber = new Redis(cluster.ports.find((port) => port !== fleetPort)!, "127.0.0.1");
    const woken = new Set<string>();
    subscriber.on("message", (_channel: string, key: string) => woken.add(key));
    await subscriber.subscribe(`${prefix}:events-notify`);
    let deleted = 0;
    // Its own connection, to count the round trips' pipelines.
    const connection = createRedis(cluster.url, "worker");
    const pipeline = connection.pipeline.bind(connection);
    let pipelines = 0;
    connection.pipeline = ((...args: Parameters<typeof pipeline>) => {
      pipelines++;
      return pipeline(...args);
    }) as typeof connection.pipeline;
    const cleanup = new DeletionCleanup({
      redis: connection,
      prefix,
      removeJob: async () => {},
      metrics: {
        sessionsDeleted: {
          inc: (_labels, value = 1) => {
            deleted += value;
          },
        },
      },
      eventsEnabled: true,
    });
    try {
      await cleanup.afterSessions({ sessionIds: sessions, runs: [] }, "api");
      await cleanup.afterBatch("b-del");
      expect(deleted).toBe(250);
      // One pipeline for the 250 sessions (the fleet's keys share its slot), not 1,000 round trips.
      expect(pipelines).toBe(1);
      for (const id of sessions) {
        const key = eventStreamKey(prefix, id);
        const [last] = (await redis.xrevrange(key, "+", "-", "COUNT", 1)) as [string, string[]][];
        expect(last![1][1], id).toBe("SESSION_DELETED");
        const ttl = await redis.pttl(key);
        expect(ttl).toBeGreaterThan(0);
        expect(ttl).toBeLessThanOrEqual(60_000);
        // The seq key is now the session's tombstone: `deleted` and nothing else, expiring.
        expect(await redis.hgetall(`${prefix}:events-seq:${id}`)).toEqual({ deleted: "1" });
        expect(await redis.pttl(`${prefix}:events-seq:${id}`)).toBeGreaterThan(0);
      }
      const [batchLast] = (await redis.xrevrange(batch.stream, "+", "-", "COUNT", 1)) as [string, string[]][];
      expect(batchLast![1][1]).toBe("BATCH_DELETED");
      expect(await redis.exists(batch.done, batch.fingerprints)).toBe(0);
      await waitFor(() => woken.size === 251, 10_000, "every stream's readers woken");
    } finally {
      subscriber.disconnect();
      await closeRedis(connection);
    }
  });

  it("with a prefix without a hash tag, ends each stream by commands of one key (its keys span slots)", async () => {
    const plain = "h1plain";
    const sessions = ["p1", "p2", "p3", "p4", "p5", "p6"];
    const ports = new Set<number>();
    for (const id of sessions) {
      await redis.xadd(eventStreamKey(plain, id), "*", "type", "MESSAGE", "data", "{}");
      await redis.hset(`${plain}:events-seq:${id}`, "seq", "1");
      ports.add(await portOf(eventStreamKey(plain, id)));
    }
    expect(ports.size).toBeGreaterThan(1);
    const cleanup = new DeletionCleanup({
      redis,
      prefix: plain,
      removeJob: async () => {},
      metrics: { sessionsDeleted: { inc: () => {} } },
      eventsEnabled: true,
    });
    await cleanup.afterSessions({ sessionIds: sessions, runs: [] }, "retention");
    for (const id of sessions) {
      const [last] = (await redis.xrevrange(eventStreamKey(plain, id), "+", "-", "COUNT", 1)) as [
        string,
        string[],
      ][];
      expect(last![1][1], id).toBe("SESSION_DELETED");
      expect(await redis.hgetall(`${plain}:events-seq:${id}`)).toEqual({ deleted: "1" });
    }
    await deleteKeys(redis, `${plain}:*`);
  });

  it("the batch stream check drops a batch stream Postgres contradicts", async () => {
    const keys = batchStreamKeys(prefix, "b-check");
    await redis.xadd(keys.stream, "*", "type", "BATCH_ENDED", "data", "{}");
    await redis.hset(keys.fingerprints, BATCH_MEMBER, "2026-12-03T10:00:00.000Z", "s1", "run:r1");
    await redis.set(keys.done, "1");
    const dropped: string[] = [];
    const check = new BatchStreamCheck({
      redis,
      prefix,
      batches: { endedAt: async () => null, missingRuns: async () => new Set() },
      onDropped: (batchId) => dropped.push(batchId),
    });
    expect(await check.dropIfStale("b-check")).toBe(true);
    expect(dropped).toEqual(["b-check"]);
    expect(await redis.exists(keys.stream, keys.done, keys.fingerprints)).toBe(0);
  });
});

describe("provider limits", () => {
  it("grants, denies, counts waiting tenants, forgets and pauses on the cluster", async () => {
    const limits = new ProviderLimits(redis, prefix, { maxWaitMs: 200, permitTtlMs: 30_000 });
    const endpoint = "api.example/v1";
    const ask = (tenant: string, request: string) =>
      limits.acquire({
        endpoint,
        limits: { maxConcurrent: 1 },
        tenant,
        weight: 1,
        request,
        estimatedTokens: 1,
      });
    const first = await ask("a", "ra");
    expect(first.granted).toBe(true);
    expect(await ask("b", "rb")).toMatchObject({ granted: false, reason: "concurrency" });
    expect(await limits.waiting(endpoint)).toEqual(new Map([["b", 1]]));
    expect(await limits.inUse(endpoint)).toBe(1);
    await limits.renew(endpoint, (first as { permit: string }).permit);
    await limits.forget(endpoint, "b", ["rb"]);
    expect(await limits.waiting(endpoint)).toEqual(new Map());
    await limits.release(endpoint, (first as { permit: string }).permit);
    expect(await limits.inUse(endpoint)).toBe(0);
    expect(await limits.pause(endpoint, 50)).toBe(50);
    await limits.correctTokens(endpoint, { tokensPerMinute: 1_000 }, 10);
    expect((await ask("b", "rb2")).granted).toBe(true);
  });

  it("counts waiting requests on the clock of the master holding them, not of whichever node TIME reaches", async () => {
    const limits = new ProviderLimits(redis, prefix, { maxWaitMs: 200 });
    const endpoint = "clock.example";
    const ask = (tenant: string, request: string) =>
      limits.acquire({
        endpoint,
        limits: { maxConcurrent: 1 },
        tenant,
        weight: 1,
        request,
        estimatedTokens: 1,
      });
    expect((await ask("a", "r1")).granted).toBe(true);
    expect((await ask("b", "r2")).granted).toBe(false);
    const fleetPort = await portOf(`${prefix}:endpoint-limits`);
    const nodes = cluster.ports.map((port) => new Redis(port, "127.0.0.1"));
    try {
      await Promise.all(nodes.map((node) => node.config("RESETSTAT")));
      for (let i = 0; i < 12; i++) expect(await limits.waiting(endpoint)).toEqual(new Map([["b", 1]]));
      // Any command at all on another master (TIME, sent to a node at random) would be counted.
      for (const [i, node] of nodes.entries()) {
        const stats = await node.info("commandstats");
        if (cluster.ports[i] === fleetPort) expect(stats).toMatch(/cmdstat_evalsha|cmdstat_eval/);
        else expect(stats, `node ${cluster.ports[i]}`).not.toMatch(/cmdstat_(time|eval|zrange)/);
      }
    } finally {
      for (const node of nodes) node.disconnect();
    }
  });
});

describe("webhook queued again after a restore", () => {
  it("removes the finished job of a webhook Postgres still owes and queues it under the same id", async () => {
    const connection = createRedis(cluster.url, "worker");
    const queue = openWebhookQueue(connection, prefix);
    const workerConnection = createRedis(cluster.url, "worker");
    let deliveries = 0;
    const worker = new Worker(QUEUES.webhooks.name, async () => void deliveries++, {
      connection: workerConnection,
      prefix,
    });
    try {
      await enqueueWebhook(queue, { batchId: "b-owed" });
      const id = QUEUES.webhooks.jobId({ batchId: "b-owed" });
      await waitFor(async () => (await queue.getJob(id))?.finishedOn !== undefined, 10_000, "delivered");
      expect(await ensureWebhookQueued(queue, "b-owed", async () => false)).toBe("left");
      expect(await ensureWebhookQueued(queue, "b-owed", async () => true)).toBe("requeued");
      await waitFor(() => deliveries === 2, 10_000, "delivered again");
    } finally {
      await worker.close();
      await queue.obliterate({ force: true });
      await queue.close();
      await closeRedis(connection);
      await closeRedis(workerConnection);
    }
  });
});

describe("fair dispatch", () => {
  it("renumbers a queue's waiting jobs (their hashes, not passed as keys) and keeps each tenant's order", async () => {
    const queue = new Queue("h1-renumber", { connection: redis, prefix });
    try {
      const fair = new FairDispatch({ redis, queue, prefix, enabled: true, renumberAt: 20, chunk: 8 });
      const first = (await fair.assign("big", 30))!;
      await queue.addBulk(
        first.map((priority, seq) => ({
          name: "run",
          data: { seq },
          opts: { priority, jobId: `big-${seq}` },
        })),
      );
      // Taken one by one and replaced: the head climbs past renumberAt, and renumberings follow.
      for (let seq = 30; seq < 80; seq++) {
        const [head] = await queue.getJobs(["prioritized"], 0, 0, true);
        await head!.remove();
        const [priority] = (await fair.assign("big", 1))!;
        await queue.add("run", { seq }, { priority, jobId: `big-${seq}` });
      }
      const [small] = (await fair.assign("small", 1))!;
      await queue.add("run", { seq: 0 }, { priority: small, jobId: "small" });
      const waiting = await queue.getJobs(["prioritized"], 0, -1, true);
      // Each job's hash says the priority its score says (the script rewrote both).
      for (const job of waiting) {
        const score = Number(await redis.zscore(queue.keys.prioritized!, job.id!));
        expect(job.priority, job.id).toBe(Math.floor(score / 2 ** 32));
      }
      expect(Number(await redis.hget(`${prefix}:fair:h1-renumber:moved`, "total"))).toBeGreaterThan(0);
      // Bounded by renumberAt + the backlog (without renumbering the last would be 80).
      expect(Math.max(...waiting.map((job) => job.priority))).toBeLessThanOrEqual(50);
      expect(waiting.findIndex((job) => job.id === "small")).toBeLessThanOrEqual(1);
      const seqs = waiting.filter((job) => job.id !== "small").map((job) => job.data.seq as number);
      expect(seqs).toEqual(Array.from({ length: 30 }, (_, i) => i + 50));
    } finally {
      await queue.obliterate({ force: true });
      await queue.close();
    }
  });
});

describe("heartbeats and the tool-name registry", () => {
  it("beats and lists live workers; registers and reads tool names", async () => {
    await beat(redis, prefix, "w1", 30_000);
    await beat(redis, prefix, "w2", 1);
    await waitFor(async () => (await heartbeats(redis, prefix)).size === 1, 5_000, "w2's beat to lapse");
    expect(await heartbeats(redis, prefix)).toEqual(new Set(["w1"]));
    await registerToolNames(redis, prefix, ["write_file", "mine"]);
    expect((await readToolNames(redis, prefix)).sort()).toEqual(["mine", "write_file"]);
  });
});

it("keeps every key of the fleet in the fleet's slot", async () => {
  const keys = await scanKeys(redis, `${prefix}*`);
  expect(keys.length).toBeGreaterThan(100);
  const slots = new Set(
    await Promise.all(keys.map(async (key) => Number(await redis.call("CLUSTER", "KEYSLOT", key)))),
  );
  expect(slots.size).toBe(1);
  expect(masters(redis)).toHaveLength(3);
});
