/**
 * A client on the tests' shared Redis (TEST_REDIS_URL, else 127.0.0.1:6379) for a file whose
 * keys all start with `prefix`: made in `beforeAll`; in `afterAll` the file's keys are deleted
 * and the client quits.
 */
import { Redis } from "ioredis";
import { afterAll, beforeAll } from "vitest";

export const TEST_REDIS_URL = process.env.TEST_REDIS_URL ?? "redis://127.0.0.1:6379";

export function sharedRedisForFile(prefix: string): { readonly redis: Redis } {
  const held = {} as { redis: Redis };
  beforeAll(() => {
    held.redis = new Redis(TEST_REDIS_URL, { maxRetriesPerRequest: 1 });
  });
  afterAll(async () => {
    const keys = await held.redis.keys(`${prefix}*`);
    if (keys.length > 0) await held.redis.del(...keys);
    await held.redis.quit();
  });
  return held;
}
