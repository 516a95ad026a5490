/**
 * When Postgres or Redis cannot be reached, a command says which one and how to start it;
 * the long-lived roles (api, worker, sweeper) check before they say "ready", and exit 2 with
 * that one line instead of starting half-way.
 */
import { execFile } from "node:child_process";
import { randomUUID } from "node:crypto";
import { mkdirSync, mkdtempSync, rmSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { promisify } from "node:util";
import postgres from "postgres";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { loadConfig } from "../src/shared/config.js";
import { createProbe } from "../src/shared/redis.js";
import { createFleetEnv, FLEET_BIN, type FleetEnv, ROOT } from "./support/fleet-env.js";
import { startRedisServer } from "./support/redis-cluster.js";

const run = promisify(execFile);
/** A Redis URL for a probe that is made and dropped, never connected (lazyConnect). */
const probeOnlyUrl = "redis://127.0.0.1:1";

async function fleet(args: string[], env: Record<string, string>, cwd = ROOT) {
  try {
    const { stdout, stderr } = await run(process.execPath, [FLEET_BIN, ...args], {
      cwd,
      env: { ...process.env, ...env },
      timeout: 30_000,
    });
    return { code: 0, stdout, stderr };
  } catch (error) {
    const e = error as { code: number; stdout: string; stderr: string };
    return { code: e.code, stdout: e.stdout, stderr: e.stderr };
  }
}

describe("unreachable services", () => {
  it("names Postgres, the address and how to start it, in one line with no stack", async () => {
    const [demo, migrate] = await Promise.all([
      fleet(["demo"], { DATABASE_URL: "postgres://postgres@127.0.0.1:1/nowhere" }),
      fleet(["migrate"], { DATABASE_URL: "postgres://postgres@127.0.0.1:1/nowhere" }),
    ]);
    for (const result of [demo, migrate]) {
      expect(result.code).toBe(2);
      const lines = result.stderr.trim().split("\n");
      expect(lines).toHaveLength(1);
      expect(lines[0]).toMatch(
        /^fleet (demo|migrate): DATABASE_URL: cannot reach Postgres at postgres:\/\/postgres@127\.0\.0\.1:1\/nowhere/,
      );
      expect(lines[0]).toMatch(/ECONNREFUSED.*Start it/);
      // A command that works where the package is installed (no compose file there), on the URL's port.
      expect(lines[0]).toContain(
        "`docker run -d -p 127.0.0.1:1:5432 -e POSTGRES_HOST_AUTH_METHOD=trust postgres:16`",
      );
      expect(lines[0]).not.toMatch(/docker compose up -d postgres`(?! in a checkout)/);
    }
  });

  it("a .env that cannot be read (a folder of that name): exit 2 naming .env, not Node's words and exit 1", async () => {
    const dir = mkdtempSync(join(tmpdir(), "fleet-dotenv-"));
    mkdirSync(join(dir, ".env"));
    try {
      const results = await Promise.all([["migrate"], ["keys", "list"]].map((args) => fleet(args, {}, dir)));
      for (const [i, result] of results.entries()) {
        const command = i === 0 ? "fleet migrate" : "fleet keys list";
        expect(result.stderr.trim()).toBe(`${command}: .env: cannot be read: it is not a file (a folder?)`);
        expect(result.code).toBe(2);
      }
    } finally {
      rmSync(dir, { recursive: true, force: true });
    }
  });

  it("names Redis the same way", async () => {
    const result = await fleet(["demo"], { REDIS_URL: "redis://127.0.0.1:1" });
    expect(result.code).toBe(2);
    expect(result.stderr.trim()).toMatch(
      /^fleet demo: REDIS_URL: cannot reach Redis at redis:\/\/127\.0\.0\.1:1 \(connect ECONNREFUSED 127\.0\.0\.1:1\)\. Start it/,
    );
    expect(result.stderr).not.toMatch(/\n\s+at /);
    expect(result.stderr).toContain("`docker run -d -p 127.0.0.1:1:6379 redis:7`");
    expect(result.stderr).not.toMatch(/docker compose up -d redis`(?! in a checkout)/);
  });

  it("a login Postgres or Redis refuses: says so and what to fix, not to start a server that runs", async () => {
    // Both servers answer: the role does not exist (SQLSTATE 28000), the Redis user is unknown
    // (WRONGPASS). Before, each line said "cannot reach … Start it".
    const role = `fleet_t_nobody_${randomUUID().slice(0, 8)}`;
    const results = await Promise.all([
      fleet(["migrate"], { DATABASE_URL: `postgres://${role}@127.0.0.1:5432/postgres` }),
      fleet(["demo"], { REDIS_URL: "redis://fleet-t-nobody:secret@127.0.0.1:6379" }),
    ]);
    const lines = results.map((result) => {
      expect(result.code, result.stderr).toBe(2);
      expect(result.stderr).not.toMatch(/\n\s+at /);
      const lines = result.stderr.trim().split("\n");
      expect(lines).toHaveLength(1);
      expect(lines[0]).not.toMatch(/cannot reach|Start it/);
      return lines[0];
    });
    console.log(lines.join("\n"));
    expect(lines[0]).toBe(
      `fleet migrate: DATABASE_URL: Postgres at postgres://${role}@127.0.0.1:5432/postgres refused the login (role "${role}" does not exist): fix the user name or password in DATABASE_URL (or the server's pg_hba.conf).`,
    );
    expect(lines[1]).toMatch(
      /^fleet demo: REDIS_URL: Redis at redis:\/\/fleet-t-nobody:\*\*\*@127\.0\.0\.1:6379 refused the login \(WRONGPASS [^)]*\): fix the user name or password in REDIS_URL\.$/,
    );
  }, 90_000);
});

describe("a Postgres that answers but takes no more connections", () => {
  const ADMIN_URL = process.env.TEST_ADMIN_DATABASE_URL ?? "postgres://postgres@127.0.0.1:5432/postgres";

  it("says it is full and what to change, not to start a server that runs", async () => {
    // A role allowed no connection gets SQLSTATE 53300, as every login does once the server's
    // max_connections are taken. Before, the line said "cannot reach … Start it".
    const role = `fleet_t_full_${randomUUID().slice(0, 8)}`;
    const admin = postgres(ADMIN_URL, { max: 1, onnotice: () => {} });
    await admin.unsafe(`create role "${role}" login connection limit 0`);
    try {
      const url = new URL(ADMIN_URL);
      url.username = role;
      const result = await fleet(["migrate"], { DATABASE_URL: url.toString() });
      expect(result.code, result.stderr).toBe(2);
      const lines = result.stderr.trim().split("\n");
      expect(lines, result.stderr).toHaveLength(1);
      expect(lines[0]).toMatch(
        /^fleet migrate: DATABASE_URL: Postgres at .* takes no more connections \(too many connections/,
      );
      expect(lines[0]).toMatch(/max_connections/);
      expect(lines[0]).not.toMatch(/cannot reach|Start it/);
    } finally {
      await admin.unsafe(`drop role "${role}"`);
      await admin.end();
    }
  }, 60_000);
});

describe("the long-lived roles check Postgres and Redis before they say ready", () => {
  const ADMIN_URL = process.env.TEST_ADMIN_DATABASE_URL ?? "postgres://postgres@127.0.0.1:5432/postgres";
  /** `fleet up` checks before it starts any child. */
  const ROLES = ["api", "worker", "sweeper", "up"] as const;
  let fleetEnv: FleetEnv;
  const empty = `fleet_t_unmigrated_${randomUUID().slice(0, 8)}`;
  const emptyUrl = new URL(ADMIN_URL);
  emptyUrl.pathname = `/${empty}`;
  const admin = postgres(ADMIN_URL, { max: 1, onnotice: () => {} });
  beforeAll(async () => {
    fleetEnv = await createFleetEnv("preflight");
    await admin.unsafe(`create database "${empty}"`);
  });
  afterAll(async () => {
    await admin.unsafe(`drop database if exists "${empty}" with (force)`);
    await admin.end();
    await fleetEnv?.close();
  });

  /** One line, exit 2: `fleet COMMAND: ` (the command that failed names itself), then `pattern`. */
  const expectOneLine = (
    result: { code: number; stdout: string; stderr: string },
    command: string,
    pattern: RegExp,
  ) => {
    expect(result.code, result.stdout + result.stderr).toBe(2);
    expect(result.stdout).not.toMatch(/ready/);
    const lines = result.stderr.trim().split("\n");
    expect(lines, result.stderr).toHaveLength(1);
    expect(lines[0]).toMatch(new RegExp(`^fleet ${command}: ${pattern.source}`));
    expect(result.stderr).not.toMatch(/\n\s+at /);
  };

  it("Postgres unreachable: api, worker, sweeper and up exit 2 naming DATABASE_URL and Postgres", async () => {
    const env = { ...fleetEnv.env, DATABASE_URL: "postgres://postgres@127.0.0.1:1/nowhere" };
    const results = await Promise.all(ROLES.map((role) => fleet([role], env)));
    for (const [i, result] of results.entries())
      expectOneLine(
        result,
        ROLES[i]!,
        /DATABASE_URL: cannot reach Postgres at postgres:\/\/postgres@127\.0\.0\.1:1\/nowhere \(connect ECONNREFUSED/,
      );
  });

  it("a port past 65535, a DATABASE_URL that is not a postgres URL, an unreadable switch, an unusable FLEET_TOOL_DIR, a REDIS_URL of another scheme, a webhook retry delay that is no number: exit 2 naming the variable", async () => {
    const notADir = join(tmpdir(), `fleet-not-a-dir-${randomUUID().slice(0, 8)}`);
    writeFileSync(notADir, "a file");
    const cases: [string[], Record<string, string>, RegExp][] = [
      [["api"], { PORT: "70000" }, /PORT: expected a port from 0 to 65535$/],
      [["up", "--workers", "1"], { PORT: "65536" }, /PORT: expected a port from 0 to 65535$/],
      [["worker"], { METRICS_PORT: "99999" }, /METRICS_PORT: expected a port from 0 to 65535$/],
      [["sweeper"], { METRICS_PORT: "99999" }, /METRICS_PORT: expected a port from 0 to 65535$/],
      [["api"], { DATABASE_URL: "notaurl" }, /DATABASE_URL: expected a postgres:\/\/ URL/],
      [["migrate"], { DATABASE_URL: "notaurl" }, /DATABASE_URL: expected a postgres:\/\/ URL/],
      [["worker"], { DATABASE_URL: "mysql://x@127.0.0.1/db" }, /DATABASE_URL: expected a postgres:\/\/ URL/],
      [["worker"], { FLEET_TOOL_DIR: join(notADir, "files") }, /FLEET_TOOL_DIR: cannot use .* \(ENOTDIR\)/],
      [["sweeper"], { FLEET_WEBHOOK_DENY_PRIVATE: "maybe" }, /FLEET_WEBHOOK_DENY_PRIVATE: expected 1\/true/],
      [["worker"], { REDIS_URL: "http://127.0.0.1:6379" }, /REDIS_URL: expected redis:\/\//],
      [["sweeper"], { FLEET_WEBHOOK_RETRY_MS: "soon" }, /FLEET_WEBHOOK_RETRY_MS: expected a number/],
    ];
    const results = await Promise.all(cases.map(([args, env]) => fleet(args, { ...fleetEnv.env, ...env })));
    rmSync(notADir, { force: true });
    for (const [i, result] of results.entries()) expectOneLine(result, cases[i]![0][0]!, cases[i]![2]);
    // Eleven CLI starts at once: on two busy cores (a loaded CI run) they took over 30 s in all.
  }, 90_000);

  it("a redis:// REDIS_URL that does not parse (a port past 65535, a typo): exit 2 naming REDIS_URL", async () => {
    // Each was `fleet worker: Invalid URL`, exit 1, naming no variable.
    const cases: [string, string][] = [
      ["worker", "redis://127.0.0.1:99999"],
      ["api", "redis://127.0.0.1:notaport"],
      ["sweeper", "rediss://[bad"],
    ];
    const results = await Promise.all(
      cases.map(([role, url]) => fleet([role], { ...fleetEnv.env, REDIS_URL: url })),
    );
    for (const [i, result] of results.entries())
      expectOneLine(result, cases[i]![0], /REDIS_URL: is not a URL .*redis:\/\/user:password@host:6379\/0$/);
  }, 60_000);

  it("a postgres:// DATABASE_URL whose port is past 65535 or no number: exit 2 saying the port is what is wrong", async () => {
    // Each said `DATABASE_URL: expected a postgres:// URL`, as if the scheme were wrong.
    const cases: [string, string, RegExp][] = [
      [
        "worker",
        "postgres://127.0.0.1:99999/db",
        /DATABASE_URL: its port 99999 is past 65535: expected e\.g\. postgres:\/\/user@host:5432\/agent_fleet$/,
      ],
      [
        "migrate",
        "postgresql://u@db.example:notaport/db",
        /DATABASE_URL: its port "notaport" is not a number: expected e\.g\. postgres:\/\/user@host:5432\/agent_fleet$/,
      ],
      [
        "api",
        "postgres://[bad/db",
        /DATABASE_URL: is not a URL \(a character out of place\?\): expected e\.g\. postgres:\/\/user@host:5432\/agent_fleet$/,
      ],
    ];
    const results = await Promise.all(
      cases.map(([role, url]) => fleet([role], { ...fleetEnv.env, DATABASE_URL: url })),
    );
    for (const [i, result] of results.entries()) expectOneLine(result, cases[i]![0], cases[i]![2]);
  }, 60_000);

  it("a FLEET_TOOL_DIR under /proc (where Node's own recursive mkdir never settles): the worker exits 2 naming it, and does not hang", async () => {
    // A worker that hangs is killed by `fleet`'s 30 s timeout: no exit code 2, no line.
    const results = await Promise.all(
      ["/proc/nope", "/proc/nope/deeper/files"].map((dir) =>
        fleet(["worker"], { ...fleetEnv.env, FLEET_TOOL_DIR: dir }),
      ),
    );
    expectOneLine(
      results[0]!,
      "worker",
      /FLEET_TOOL_DIR: cannot use \/proc\/nope for the file tools \(ENOENT\)/,
    );
    expectOneLine(
      results[1]!,
      "worker",
      /FLEET_TOOL_DIR: cannot use \/proc\/nope\/deeper\/files for the file tools \(ENOENT\)/,
    );
  }, 60_000);

  it("Redis unreachable: api, worker, sweeper and up exit 2 naming REDIS_URL and Redis", async () => {
    const env = { ...fleetEnv.env, REDIS_URL: "redis://127.0.0.1:1" };
    const results = await Promise.all(ROLES.map((role) => fleet([role], env)));
    for (const [i, result] of results.entries())
      expectOneLine(
        result,
        ROLES[i]!,
        /REDIS_URL: cannot reach Redis at redis:\/\/127\.0\.0\.1:1 \(connect ECONNREFUSED/,
      );
  });

  it("a Redis that accepts connections but answers nothing (frozen): exit 2 naming REDIS_URL, no hang", async () => {
    // The kernel completes the TCP handshake of a stopped redis-server, so only a wait for
    // the answer ends the check; before, every role waited for it for ever.
    const frozen = await startRedisServer();
    try {
      frozen.signal(frozen.ports[0]!, "SIGSTOP");
      // A short check (FLEET_PREFLIGHT_TIMEOUT_MS, default 5 s): the case proves the check
      // ends, not how long it takes; the setting itself is proven below.
      const env = { ...fleetEnv.env, REDIS_URL: frozen.url, FLEET_PREFLIGHT_TIMEOUT_MS: "300" };
      const results = await Promise.all(ROLES.map((role) => fleet([role], env)));
      for (const [i, result] of results.entries())
        expectOneLine(
          result,
          ROLES[i]!,
          /REDIS_URL: cannot reach Redis at redis:\/\/127\.0\.0\.1:\d+ \(Command timed out/,
        );
    } finally {
      await frozen.stop();
    }
  });

  it("FLEET_PREFLIGHT_TIMEOUT_MS sets the check's waits (default 5 s); one that is no positive number of ms is refused naming it", () => {
    const probeOf = (env: Record<string, string>) => {
      const probe = createProbe(probeOnlyUrl, loadConfig({ ...fleetEnv.env, ...env }).preflightTimeoutMs);
      const { connectTimeout, commandTimeout } = probe.options;
      probe.disconnect();
      return { connectTimeout, commandTimeout };
    };
    expect(probeOf({})).toEqual({ connectTimeout: 5_000, commandTimeout: 5_000 });
    expect(probeOf({ FLEET_PREFLIGHT_TIMEOUT_MS: "250" })).toEqual({
      connectTimeout: 250,
      commandTimeout: 250,
    });
    for (const bad of ["0", "soon", "-1", "600001"])
      expect(() => loadConfig({ ...fleetEnv.env, FLEET_PREFLIGHT_TIMEOUT_MS: bad })).toThrow(
        expect.objectContaining({ field: "FLEET_PREFLIGHT_TIMEOUT_MS" }),
      );
  });

  it("fleet keys and fleet resume-point SESSION_ID on a database that is missing or not migrated: exit 2 saying to run `fleet migrate`", async () => {
    // Before: `fleet: relation "api_keys" does not exist` (exit 1), or `database "…" does not exist`.
    const missing = new URL(ADMIN_URL);
    missing.pathname = `/fleet_t_missing_${randomUUID().slice(0, 8)}`;
    const commands = [
      ["keys", "list"],
      ["keys", "create", "--tenant", "t"],
      ["resume-point", randomUUID()],
    ];
    const results = await Promise.all(
      [missing, emptyUrl].flatMap((url) =>
        commands.map((args) => fleet(args, { ...fleetEnv.env, DATABASE_URL: url.toString() })),
      ),
    );
    for (const [i, result] of results.entries()) {
      const what = i < commands.length ? "does not exist" : "is not migrated";
      const args = commands[i % commands.length]!;
      expectOneLine(
        result,
        args[0] === "keys" ? `keys ${args[1]}` : args[0]!,
        new RegExp(`DATABASE_URL: .*: the database ${what}; run \`fleet migrate\``),
      );
    }
    console.log(results.map((r) => r.stderr.trim()).join("\n"));
  }, 90_000);

  it("a database that is missing or not migrated: exit 2 saying to run `fleet migrate`", async () => {
    const missing = new URL(ADMIN_URL);
    missing.pathname = `/fleet_t_missing_${randomUUID().slice(0, 8)}`;
    const [absent, unmigrated] = await Promise.all([
      fleet(["worker"], { ...fleetEnv.env, DATABASE_URL: missing.toString() }),
      fleet(["sweeper"], { ...fleetEnv.env, DATABASE_URL: emptyUrl.toString() }),
    ]);
    expectOneLine(absent, "worker", /DATABASE_URL: .*: the database does not exist; run `fleet migrate`/);
    expectOneLine(
      unmigrated,
      "sweeper",
      /DATABASE_URL: .*: the database is not migrated; run `fleet migrate`/,
    );
    // Checking created nothing.
    const [row] = await admin<{ n: number }[]>`
      select count(*)::int as n from pg_database where datname = ${missing.pathname.slice(1)}`;
    expect(row!.n).toBe(0);
  });
});
