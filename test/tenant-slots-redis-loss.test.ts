/**
 * The fleet-wide per-tenant places (FLEET_SSE_MAX_STREAMS_PER_TENANT,
 * FLEET_RESULTS_MAX_READS_PER_TENANT: tenant-slot-leases.ts) after Redis lost its data
 * (FLUSHALL, a failover to an empty replica) while a tenant held them. Before, the leases were
 * gone and the next takes were granted on an empty count until the holders' renewals put theirs
 * back: with its places spread over N API processes, a tenant opened up to N × the bound, and
 * kept them open. Now a process that has used the leases, or a holder whose renewal finds its
 * lease gone, makes new takes wait for one lease time to live (by then every live holder has
 * put its lease back), and they are then counted with them. A Redis server of the file's own,
 * flushed for real.
 */
import type { ChildProcess } from "node:child_process";
import type { Redis } from "ioredis";
import { afterAll, beforeAll, expect, it } from "vitest";
import { type SlotAnswer, TenantSlotLeases } from "../src/producer/tenant-slot-leases.js";
import { closeRedis, createRedis } from "../src/shared/redis.js";
import { waitFor } from "./support/fleet-env.js";
import { freePort, startRedis, stopRedis } from "./support/private-redis.js";

const TTL_MS = 1500;
const PREFIX = "t-leases-loss";

let server: ChildProcess;
let first: Redis;
let second: Redis;
let probe: Redis;

beforeAll(async () => {
  const port = await freePort();
  server = await startRedis(port);
  const url = `redis://127.0.0.1:${port}`;
  [first, second, probe] = [
    createRedis(url, "producer"),
    createRedis(url, "producer"),
    createRedis(url, "producer"),
  ];
}, 30_000);
afterAll(async () => {
  await Promise.all([first, second, probe].map((redis) => redis && closeRedis(redis)));
  if (server) await stopRedis(server);
});

function taken(answer: SlotAnswer): () => void {
  if (!answer.taken) throw new Error(`refused, ${answer.held} held`);
  return answer.release;
}

it("a tenant holding its bound gets no place more after Redis lost its data", async () => {
  const a = new TenantSlotLeases({ redis: first, prefix: PREFIX, ttlMs: TTL_MS });
  const b = new TenantSlotLeases({ redis: second, prefix: PREFIX, ttlMs: TTL_MS });
  const one = taken(await a.take("event_streams", "acme", 2));
  const two = taken(await b.take("event_streams", "acme", 2));
  await probe.flushall();
  // Both places are still open, on two API processes: neither gives a third (each take waits
  // until the holders' renewals have put both back, then counts them).
  expect(await b.take("event_streams", "acme", 2)).toEqual({ taken: false, held: 2 });
  expect(await a.take("event_streams", "acme", 2)).toEqual({ taken: false, held: 2 });
  // A new API process counts them too.
  const c = new TenantSlotLeases({ redis: probe, prefix: PREFIX, ttlMs: TTL_MS });
  expect(await probe.zcard(`${PREFIX}:slots:event_streams:acme`)).toBe(2);
  expect(await c.take("event_streams", "acme", 2)).toEqual({ taken: false, held: 2 });
  // A place freed is a place again, once the lost state can no longer count.
  one();
  await waitFor(
    async () => {
      const answer = await c.take("event_streams", "acme", 2);
      if (answer.taken) answer.release();
      return answer.taken;
    },
    10_000,
    "a place after a release",
  );
  two();
}, 30_000);

it("a fleet's first places are not held back", async () => {
  await probe.flushall();
  const fresh = new TenantSlotLeases({ redis: probe, prefix: `${PREFIX}-fresh`, ttlMs: 60_000 });
  taken(await fresh.take("results_reads", "new", 1))();
  taken(
    await new TenantSlotLeases({ redis: first, prefix: `${PREFIX}-fresh`, ttlMs: 60_000 }).take(
      "results_reads",
      "new",
      1,
    ),
  )();
});
