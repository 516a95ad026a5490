/**
 * The commands a "cannot reach" line offers start the server the URL names, and work where the
 * package is installed: before, they were `docker compose up -d postgres` / `redis` (the npm
 * package ships no compose file) and `pg_ctlcluster 15 main start` (one Debian version's).
 */
import { describe, expect, it } from "vitest";
import { startPostgresHint, startRedisHint } from "../src/shared/start-hints.js";

describe("how to start Postgres or Redis", () => {
  it("runs Postgres on the URL's port, as its user, with the login the URL makes", () => {
    expect(startPostgresHint("postgres://postgres@127.0.0.1:5432/agent_fleet")).toMatch(
      /^`docker run -d -p 127\.0\.0\.1:5432:5432 -e POSTGRES_HOST_AUTH_METHOD=trust postgres:16`, /,
    );
    expect(startPostgresHint("postgres://bob:secret@localhost/app")).toMatch(
      /^`docker run -d -p 127\.0\.0\.1:5432:5432 -e POSTGRES_HOST_AUTH_METHOD=trust -e POSTGRES_USER=bob postgres:16`/,
    );
    // A name a shell would read otherwise is left out, and the password never shows.
    expect(startPostgresHint("postgres://a%20b;rm:secret@db:6543/x")).toMatch(
      /-p 127\.0\.0\.1:6543:5432 -e POSTGRES_HOST_AUTH_METHOD=trust postgres:16`/,
    );
    expect(startPostgresHint("postgres://a:secret@db/x")).not.toContain("secret");
  });

  it("runs Redis on the URL's port; a cluster's seed list gets the default", () => {
    expect(startRedisHint("redis://127.0.0.1:6380")).toBe(
      "`docker run -d -p 127.0.0.1:6380:6379 redis:7`, `redis-server --port 6380 --daemonize yes`, or `docker compose up -d redis` in a checkout",
    );
    expect(startRedisHint("rediss://u:p@host")).toContain("-p 127.0.0.1:6379:6379");
    expect(startRedisHint("redis+cluster://10.0.0.1:7000,10.0.0.2:7001")).toContain("--port 6379 ");
  });

  it("name the compose file only for a checkout", () => {
    for (const hint of [startPostgresHint("postgres://x@h/d"), startRedisHint("redis://h")])
      expect(hint).toMatch(/`docker compose up -d \w+` in a checkout$/);
  });
});
