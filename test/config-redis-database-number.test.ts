/**
 * REDIS_URL's database number (`redis://host:6379/3`). ioredis sends SELECT as it connects and,
 * when Redis refuses it, only emits an error event: the connection stays on database 0. So a
 * number past the server's `databases` (16 by default) started every role on database 0 — the
 * keyspace another fleet (or the operator's other data) may use — with nothing said; and one
 * that is no number (`/x`) failed the sweeper's first command, exit 70, "unhandled rejection:
 * ERR value is not an integer or out of range", a supervisor restarting it for ever (found by
 * hand: `REDIS_URL=redis://127.0.0.1:6379/99 fleet sweeper` said "ready").
 */
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { loadConfig } from "../src/shared/config.js";
import { runFleetCli } from "./support/fleet-cli.js";
import { createFleetEnv, type FleetEnv } from "./support/fleet-env.js";

describe("REDIS_URL's database number", () => {
  it("is refused when the environment is read unless it is a whole number", () => {
    for (const db of ["x", "1.5", "-1", "3/4"])
      expect(() => loadConfig({ REDIS_URL: `redis://127.0.0.1:6379/${db}` })).toThrow(
        expect.objectContaining({
          field: "REDIS_URL",
          message: `REDIS_URL: the database number ${JSON.stringify(db)} after the port is not a whole number: expected e.g. redis://host:6379/0`,
        }),
      );
    for (const db of ["", "0", "3", "15"])
      expect(loadConfig({ REDIS_URL: `redis://127.0.0.1:6379/${db}` }).redisUrl).toBe(
        `redis://127.0.0.1:6379/${db}`,
      );
  });

  describe("one past the server's databases", () => {
    let fleet: FleetEnv;
    beforeAll(async () => {
      fleet = await createFleetEnv("redis-db-number");
    });
    afterAll(async () => {
      await fleet?.close();
    });

    it("stops each role with one line naming REDIS_URL, exit 2, not on database 0", async () => {
      const url = "redis://127.0.0.1:6379/99";
      for (const role of ["sweeper", "worker"]) {
        const result = await runFleetCli(
          [role],
          { ...fleet.env, REDIS_URL: url, FLEET_PREFLIGHT_TIMEOUT_MS: "3000", FLEET_DEBUG: undefined },
          30_000,
        );
        expect(result.code, result.stdout + result.stderr).toBe(2);
        expect(result.stdout).not.toContain("ready");
        const lines = result.stderr.trim().split("\n");
        expect(lines, result.stderr).toHaveLength(1);
        expect(lines[0]).toBe(
          `fleet ${role}: REDIS_URL: Redis at ${url} has no database 99 (ERR DB index is out of range): ` +
            "give a number below its `databases` setting (16 unless configured), e.g. redis://host:6379/0",
        );
      }
    }, 60_000);
  });
});
