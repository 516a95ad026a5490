/**
 * The leases behind the fleet-wide per-tenant bounds (tenant-slot-leases.ts) on a real Redis
 * server of the file's own: two holders (two API processes' connections) share one bound, a
 * release frees its place at once, and while Redis cannot be reached a place is given on the
 * process's own bound (said once), then counted in Redis by the renewals once it is back.
 */
import type { ChildProcess } from "node:child_process";
import type { Redis } from "ioredis";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { renewEveryMs, type SlotAnswer, TenantSlotLeases } from "../src/producer/tenant-slot-leases.js";
import { closeRedis, createRedis } from "../src/shared/redis.js";
import { waitFor } from "./support/fleet-env.js";
import { freePort, startRedis, stopRedis } from "./support/private-redis.js";

const TTL_MS = 1500;
const PREFIX = "t-leases";

function taken(answer: SlotAnswer): () => void {
  if (!answer.taken) throw new Error(`refused, ${answer.held} held`);
  return answer.release;
}

describe("tenant slot leases", () => {
  let port: number;
  let server: ChildProcess;
  let first: Redis;
  let second: Redis;
  let probe: Redis;

  beforeAll(async () => {
    port = await freePort();
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

  const count = (kind: string, tenant: string) => probe.zcard(`${PREFIX}:slots:${kind}:${tenant}`);

  it("renews every third of the time to live", () => {
    expect(renewEveryMs(5000)).toBe(1666);
    expect(renewEveryMs(30)).toBe(50);
  });

  it("two holders share one bound per tenant and kind; a release frees its place at once", async () => {
    const a = new TenantSlotLeases({ redis: first, prefix: PREFIX, ttlMs: TTL_MS });
    const b = new TenantSlotLeases({ redis: second, prefix: PREFIX, ttlMs: TTL_MS });
    const one = taken(await a.take("results_reads", "acme", 2));
    const two = taken(await b.take("results_reads", "acme", 2));
    expect(await b.take("results_reads", "acme", 2)).toEqual({ taken: false, held: 2 });
    expect(await a.take("results_reads", "acme", 2)).toEqual({ taken: false, held: 2 });
    // Another tenant, another kind: places of their own.
    taken(await a.take("results_reads", "other", 2))();
    taken(await a.take("event_streams", "acme", 2))();
    // Held for longer than the time to live: still counted (renewed).
    await new Promise((resolve) => setTimeout(resolve, 2 * TTL_MS));
    expect(await a.take("results_reads", "acme", 2)).toEqual({ taken: false, held: 2 });
    one();
    one();
    expect(await count("results_reads", "acme")).toBe(1);
    taken(await b.take("results_reads", "acme", 2))();
    two();
    await waitFor(async () => (await count("results_reads", "acme")) === 0, 10_000, "every lease released");
    expect(a.holding() + b.holding()).toBe(0);
  }, 30_000);

  it("gives places without Redis (said once) and counts them once Redis is back", async () => {
    const said: unknown[] = [];
    const leases = new TenantSlotLeases({
      redis: first,
      prefix: PREFIX,
      ttlMs: TTL_MS,
      onUnavailable: (error) => said.push(error),
    });
    await stopRedis(server);
    const held = [
      taken(await leases.take("results_reads", "outage", 2)),
      taken(await leases.take("results_reads", "outage", 2)),
    ];
    expect(said).toHaveLength(1);
    server = await startRedis(port);
    await waitFor(
      async () => (await count("results_reads", "outage").catch(() => -1)) === 2,
      30_000,
      "the places given during the outage counted in Redis",
    );
    const other = new TenantSlotLeases({ redis: second, prefix: PREFIX, ttlMs: TTL_MS });
    await waitFor(
      async () => (await other.take("results_reads", "outage", 2).catch(() => undefined))?.taken === false,
      30_000,
      "another holder refused while both places are held",
    );
    for (const release of held) release();
    await waitFor(async () => (await count("results_reads", "outage")) === 0, 10_000, "both released");
  }, 60_000);
});
