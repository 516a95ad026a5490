/**
 * `fleet migrate` touches only Postgres: it migrates with Redis down (or REDIS_URL naming a
 * port nothing listens on). Before, it checked Redis first and refused with exit 2
 * (`fleet migrate: REDIS_URL: cannot reach Redis at …`), so a deploy step that migrates
 * before Redis is up, or a database migrated from a host without Redis, failed for nothing.
 * `fleet up` and `fleet demo`, which go on to run the roles, still check Redis first.
 */
import { randomUUID } from "node:crypto";
import { createServer } from "node:net";
import postgres from "postgres";
import { afterAll, describe, expect, it } from "vitest";
import { runFleetCli } from "./support/fleet-cli.js";

const ADMIN_URL = process.env.TEST_ADMIN_DATABASE_URL ?? "postgres://postgres@127.0.0.1:5432/postgres";

/** A loopback port nothing listens on (taken, then released). */
async function closedPort(): Promise<number> {
  const server = createServer();
  await new Promise<void>((resolve) => server.listen(0, "127.0.0.1", resolve));
  const { port } = server.address() as { port: number };
  await new Promise<void>((resolve) => server.close(() => resolve()));
  return port;
}

describe("fleet migrate without Redis", () => {
  const admin = postgres(ADMIN_URL, { max: 1, onnotice: () => {} });
  const name = `fleet_t_migredis_${randomUUID().slice(0, 8)}`;
  const url = new URL(ADMIN_URL);
  url.pathname = `/${name}`;
  afterAll(async () => {
    await admin.unsafe(`drop database if exists "${name}" with (force)`);
    await admin.end();
  });

  it("creates and migrates the database, exit 0, with nothing at REDIS_URL", async () => {
    const redisUrl = `redis://127.0.0.1:${await closedPort()}`;
    const result = await runFleetCli(["migrate"], {
      DATABASE_URL: url.toString(),
      REDIS_URL: redisUrl,
      FLEET_PREFIX: `t-mr-${randomUUID().slice(0, 8)}`,
    });
    expect(result.stderr).toBe("");
    expect(result.code).toBe(0);
    expect(result.stdout).toBe("migrations applied\n");
    const sql = postgres(url.toString(), { max: 1, onnotice: () => {} });
    try {
      const [row] = await sql<{ n: number }[]>`select count(*)::int as n from drizzle.__drizzle_migrations`;
      expect(row?.n).toBeGreaterThan(0);
    } finally {
      await sql.end();
    }
  });
});
