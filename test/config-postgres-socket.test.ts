/**
 * A DATABASE_URL naming a Unix socket the libpq way, `postgres:///agent_fleet?host=/var/run/postgresql`.
 * postgres.js reads no `host` parameter: it sent `host` to the server as a setting, and every
 * role stopped with `cannot reach Postgres … (unrecognized configuration parameter "host").
 * Start it (e.g. docker run …)` — of a server that runs (found by hand). postgres.js takes a
 * socket directory from PGHOST when the URL names no host, which works for every role; the
 * line now says so. Refused when the environment is read, before any connection.
 */
import { describe, expect, it } from "vitest";
import { loadConfig } from "../src/shared/config.js";
import { runFleetCli } from "./support/fleet-cli.js";

const WORDS =
  'DATABASE_URL: postgres.js reads no "host" parameter (it went to the server as a setting): for a Unix socket, ' +
  "leave the host out of the URL and name the socket's directory in PGHOST, e.g. PGHOST=/var/run/postgresql " +
  "DATABASE_URL=postgres:///agent_fleet (the user in PGUSER); for a TCP host, put it after the //";

describe("DATABASE_URL with a host parameter", () => {
  it("is refused when the environment is read, saying how to name a socket", () => {
    for (const url of [
      "postgres:///agent_fleet?host=/var/run/postgresql",
      "postgresql://fleet@localhost/agent_fleet?host=%2Ftmp",
      "postgres:///agent_fleet?sslmode=disable&host=db.example",
    ])
      expect(() => loadConfig({ DATABASE_URL: url }), url).toThrow(WORDS);
    expect(loadConfig({ DATABASE_URL: "postgres:///agent_fleet" }).databaseUrl).toBe(
      "postgres:///agent_fleet",
    );
  });

  it('fleet migrate prints that line, exit 2, with no "Start it"', async () => {
    const refused = await runFleetCli(
      ["migrate"],
      { DATABASE_URL: "postgres:///agent_fleet?host=/var/run/postgresql", FLEET_DEBUG: undefined },
      30_000,
    );
    expect(refused.code, refused.stderr).toBe(2);
    expect(refused.stderr.trim()).toBe(`fleet migrate: ${WORDS}`);
  });
});
