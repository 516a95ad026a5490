/**
 * Checks that Postgres and Redis answer before a command starts, and says which one does
 * not and how to start it (instead of a driver's stack trace).
 */
import { Redis } from "ioredis";
import postgres from "postgres";
import type { FleetConfig } from "./config.js";
import { ValidationError } from "./errors.js";

function redact(url: string): string {
  try {
    const u = new URL(url);
    if (u.password) u.password = "***";
    return u.toString();
  } catch {
    return url;
  }
}

export async function checkPostgres(url: string, database = "postgres"): Promise<void> {
  const admin = new URL(url);
  admin.pathname = `/${database}`;
  const sql = postgres(admin.toString(), { max: 1, connect_timeout: 5, onnotice: () => {} });
  try {
    await sql`select 1`;
  } catch (error) {
    throw new ValidationError(
      "DATABASE_URL",
      `cannot reach Postgres at ${redact(url)} (${(error as Error).message}). Start it (e.g. ` +
        "`pg_ctlcluster 15 main start`, or `docker compose up -d postgres`) or set DATABASE_URL.",
    );
  } finally {
    await sql.end({ timeout: 1 }).catch(() => {});
  }
}

export async function checkRedis(url: string): Promise<void> {
  const redis = new Redis(url, {
    lazyConnect: true,
    maxRetriesPerRequest: 0,
    retryStrategy: () => null,
    connectTimeout: 5_000,
  });
  let cause: Error | undefined;
  redis.on("error", (error: Error) => {
    cause ??= error;
  });
  try {
    await redis.connect();
    await redis.ping();
  } catch (thrown) {
    // ioredis reports "Connection is closed"; the socket's own error says why.
    const error = cause ?? (thrown as Error);
    throw new ValidationError(
      "REDIS_URL",
      `cannot reach Redis at ${redact(url)} (${(error as Error).message}). Start it (e.g. ` +
        "`redis-server --daemonize yes`, or `docker compose up -d redis`) or set REDIS_URL.",
    );
  } finally {
    redis.disconnect();
  }
}

export async function checkServices(config: FleetConfig): Promise<void> {
  await checkPostgres(config.databaseUrl);
  await checkRedis(config.redisUrl);
}
