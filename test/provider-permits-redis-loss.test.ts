/**
 * An endpoint's `maxConcurrent` (contracts §15) after Redis lost its data (FLUSHALL, a failover
 * to an empty replica) while requests held permits. The permits are kept only in Redis: before,
 * they were gone, a renewal put nothing back (ZADD XX), and every worker was granted
 * `maxConcurrent` new permits beside the requests still streaming — 2 × the bound, more at each
 * loss, for as long as those responses lasted. Now the state records that it was lost: a worker
 * that had used the endpoint, or a holder renewing a permit Redis no longer has, holds back new
 * permits for one permit time to live (by then every live holder has put its permit back, and a
 * permit not renewed for that long would not count anyway), and a holder's renewal puts its
 * permit back. Here the loss is the deletion of this test's keys (the shared Redis is never
 * flushed).
 */
import { randomUUID } from "node:crypto";
import { Redis } from "ioredis";
import { afterAll, beforeAll, expect, it } from "vitest";
import { ProviderLimits } from "../src/shared/provider-limits.js";

const REDIS_URL = process.env.TEST_REDIS_URL ?? "redis://127.0.0.1:6379";
const prefix = `t-permit-loss-${randomUUID().slice(0, 8)}`;
let redis: Redis;

beforeAll(() => {
  redis = new Redis(REDIS_URL);
});
afterAll(async () => {
  await loseData();
  await redis.quit();
});

/** What a FLUSHALL does to this fleet's keys. */
async function loseData(): Promise<void> {
  const keys = await redis.keys(`${prefix}:*`);
  if (keys.length > 0) await redis.del(...keys);
}

const conc = { maxConcurrent: 2 };
const ask = (limits: ProviderLimits, endpoint: string, tenant = "t") =>
  limits.acquire({ endpoint, limits: conc, tenant, weight: 1, request: randomUUID(), estimatedTokens: 1 });

it("a worker that used the endpoint gets no new permit while the lost ones may still be held", async () => {
  const worker = new ProviderLimits(redis, prefix, { maxWaitMs: 200, permitTtlMs: 1_500 });
  const a = await ask(worker, "seen");
  const b = await ask(worker, "seen");
  expect(a.granted && b.granted).toBe(true);
  await loseData();
  // Two requests still stream on those permits: a third is not granted.
  expect(await ask(worker, "seen")).toMatchObject({ granted: false, reason: "concurrency" });
  // Once no lost permit can count any more, the endpoint is served again.
  if (a.granted) await worker.release("seen", a.permit);
  if (b.granted) await worker.release("seen", b.permit);
  const deadline = Date.now() + 30_000;
  let again = await ask(worker, "seen");
  while (!again.granted && Date.now() < deadline) {
    await new Promise((r) => setTimeout(r, 200));
    again = await ask(worker, "seen");
  }
  expect(again.granted).toBe(true);
});

it("a holder's renewal puts its permit back and holds back workers that never saw the state", async () => {
  const holder = new ProviderLimits(redis, prefix, { maxWaitMs: 200, permitTtlMs: 60_000 });
  const a = await ask(holder, "renewed");
  const b = await ask(holder, "renewed");
  expect(a.granted && b.granted).toBe(true);
  await loseData();
  if (a.granted) await holder.renew("renewed", a.permit);
  if (b.granted) await holder.renew("renewed", b.permit);
  expect(await holder.inUse("renewed")).toBe(2);
  // A worker started after the loss: the renewed permits count, and nothing more is granted.
  const newcomer = new ProviderLimits(redis, prefix, { maxWaitMs: 200, permitTtlMs: 60_000 });
  expect(await ask(newcomer, "renewed", "other")).toMatchObject({ granted: false, reason: "concurrency" });
  if (a.granted) await holder.release("renewed", a.permit);
  // One permit freed, but others of the lost state may not have been renewed yet: still held back.
  expect(await ask(newcomer, "renewed", "other")).toMatchObject({ granted: false, reason: "concurrency" });
});

it("a fleet's first use of an endpoint is not held back", async () => {
  const fresh = new ProviderLimits(redis, prefix, { maxWaitMs: 200, permitTtlMs: 60_000 });
  expect((await ask(fresh, "first")).granted).toBe(true);
  expect((await ask(new ProviderLimits(redis, prefix, { permitTtlMs: 60_000 }), "first")).granted).toBe(true);
});
