/**
 * How a pool (openDatabase) behaves while Postgres is cut off and once it is back, through
 * a TCP proxy (test/support/pg-proxy.ts):
 * - a statement given to a connection between its error and its close (a retry in the failed
 *   statement's `catch`) fails too, instead of waiting unsent until another statement makes
 *   the connection connect again (scripts/patch-postgres.mjs, patch 3);
 * - after many failed connects, the next one is tried within a second, not after postgres.js's
 *   own backoff (up to 20 s, during which a statement waits: an API request was answered 503
 *   after 11 s, and the first after the outage after 1.3-2.6 s; the unit test checks the bound).
 */
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { openDatabase, reconnectDelaySeconds } from "../src/shared/db/client.js";
import { isServiceUnavailable } from "../src/shared/unavailable.js";
import { type PgProxy, startPgProxy } from "./support/pg-proxy.js";

const ADMIN_URL = process.env.TEST_ADMIN_DATABASE_URL ?? "postgres://postgres@127.0.0.1:5432/postgres";
const realTimeout = globalThis.setTimeout;
const realPause = (ms: number) => new Promise((r) => realTimeout(r, ms));

describe("a pool while Postgres is cut off", () => {
  let proxy: PgProxy;
  beforeAll(async () => {
    proxy = await startPgProxy();
  });
  afterAll(async () => {
    await proxy?.close();
  });

  it("reconnect delays stay within a second however many connects failed", () => {
    for (let n = 0; n <= 60; n++) {
      expect(reconnectDelaySeconds(n, () => 1)).toBeLessThanOrEqual(1);
      expect(reconnectDelaySeconds(n, () => 0)).toBeGreaterThan(0);
    }
  });

  it("fails a statement sent right after a reset's error, instead of keeping it unsent", async () => {
    const database = openDatabase(proxy.urlFor(ADMIN_URL), { max: 1 });
    try {
      await database.sql`select 1`;
      await proxy.reset();
      // The retry is given to the connection in the first failure's own handler.
      const second = await database.sql`select 1`.then(
        () => "answered",
        () =>
          Promise.race([
            database.sql`select 2`.then(
              () => "answered",
              (e: unknown) => (isServiceUnavailable(e) ? "failed as unavailable" : `failed: ${e}`),
            ),
            realPause(10_000).then(() => "still waiting after 10 s"),
          ]),
      );
      expect(second).toBe("failed as unavailable");
    } finally {
      await proxy.restore();
      await database.close();
    }
  }, 30_000);

});
