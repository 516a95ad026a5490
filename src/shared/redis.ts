/** Redis connections. Workers wait for Redis to come back; producers fail fast. */
import { Redis } from "ioredis";

export type RedisRole = "worker" | "producer";

export function createRedis(url: string, role: RedisRole, name?: string): Redis {
  const redis = new Redis(url, {
    // BullMQ workers need null (block forever); a producer should fail fast instead.
    maxRetriesPerRequest: role === "worker" ? null : 1,
    enableOfflineQueue: true,
    connectionName: name,
    retryStrategy: (times) => Math.min(50 * 2 ** Math.min(times, 6), 2_000),
    lazyConnect: false,
  });
  // ioredis reconnects by itself; the commands that fail meanwhile report their own errors.
  // Without a listener every failed reconnect attempt would print an "Unhandled error event".
  redis.on("error", () => {});
  return redis;
}

/** Closes a connection even when it is already broken. */
export async function closeRedis(redis: Redis): Promise<void> {
  try {
    await redis.quit();
  } catch {
    redis.disconnect();
  }
}
