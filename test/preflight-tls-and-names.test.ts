/**
 * Postgres or Redis that runs, reached the wrong way, or a host name that does not resolve.
 * Each was said as an unreachable server, with "Start it (e.g. `docker run …`)": for
 * `?sslmode=require` against a Postgres without TLS ("Client network socket disconnected
 * before secure TLS connection was established"), for `rediss://` against a Redis without
 * TLS (the ClientHello waits for an answer: "connect ETIMEDOUT"), and for a host name that
 * does not resolve (getaddrinfo ENOTFOUND), where starting a local server helps nothing
 * (found by hand). Now the line says what is wrong: TLS asked of a server without it, or the
 * name. One line naming the variable, exit 2; real processes, the shared servers (no TLS).
 */
import { describe, expect, it } from "vitest";
import { runFleetCli } from "./support/fleet-cli.js";

const BASE = {
  FLEET_PREFLIGHT_TIMEOUT_MS: "2000",
  FLEET_DEBUG: undefined,
  FLEET_PREFIX: "preflight-tls-names",
};

/** `fleet sweeper` checks Postgres then Redis; `fleet up` checks Redis before its database exists. */
async function oneLine(env: Record<string, string | undefined>, command = "sweeper"): Promise<string> {
  const result = await runFleetCli([command], { ...BASE, ...env }, 30_000);
  expect(result.code, result.stdout + result.stderr).toBe(2);
  const lines = result.stderr.trim().split("\n");
  expect(lines, result.stderr).toHaveLength(1);
  expect(lines[0]).not.toContain("Start it");
  return lines[0]!;
}

describe("a server reached the wrong way, a name that does not resolve", () => {
  it("DATABASE_URL asking TLS (sslmode=require) of a Postgres without it", async () => {
    const url = "postgres://postgres@127.0.0.1:5432/agent_fleet?sslmode=require";
    expect(await oneLine({ DATABASE_URL: url })).toBe(
      `fleet sweeper: DATABASE_URL: Postgres at ${url} did not take a TLS connection ` +
        "(Client network socket disconnected before secure TLS connection was established): " +
        "DATABASE_URL asks for TLS (sslmode); turn ssl on in the server, or remove sslmode if it has none",
    );
  });

  it("DATABASE_URL with a host name that does not resolve", async () => {
    const url = "postgres://postgres@db.fleet-test.invalid:5432/agent_fleet";
    expect(await oneLine({ DATABASE_URL: url })).toBe(
      `fleet sweeper: DATABASE_URL: the host "db.fleet-test.invalid" of ${url} does not resolve ` +
        "(getaddrinfo ENOTFOUND db.fleet-test.invalid): check its spelling, or the DNS this machine uses",
    );
  });

  it("REDIS_URL rediss:// to a Redis without TLS, and a Redis host that does not resolve", async () => {
    expect(await oneLine({ REDIS_URL: "rediss://127.0.0.1:6379" }, "up")).toBe(
      "fleet up: REDIS_URL: Redis at rediss://127.0.0.1:6379 did not take a TLS connection (connect ETIMEDOUT): " +
        "rediss:// asks for TLS; use redis:// for a Redis without it",
    );
    expect(await oneLine({ REDIS_URL: "redis://cache.fleet-test.invalid:6379" }, "up")).toBe(
      'fleet up: REDIS_URL: the host "cache.fleet-test.invalid" of redis://cache.fleet-test.invalid:6379 does not resolve ' +
        "(getaddrinfo ENOTFOUND cache.fleet-test.invalid): check its spelling, or the DNS this machine uses",
    );
  });
});
