/**
 * A migration that fails says why, on one line: `fleet migrate` on a database that already
 * holds a table of the same name as one of ours (another application's `sessions`), the most
 * common way a first migration fails. Before, stderr was drizzle's "Failed query:" with the
 * whole CREATE TABLE statement over 19 lines and its parameters, and not Postgres's reason.
 */
import { execFile } from "node:child_process";
import { randomUUID } from "node:crypto";
import postgres from "postgres";
import { afterAll, describe, expect, it } from "vitest";
import { migrationFailure } from "../src/shared/db/migrate.js";
import { FLEET_BIN, ROOT } from "./support/fleet-env.js";

const ADMIN_URL = process.env.TEST_ADMIN_DATABASE_URL ?? "postgres://postgres@127.0.0.1:5432/postgres";
const REDIS_URL = process.env.TEST_REDIS_URL ?? "redis://127.0.0.1:6379";

type Exit = { code: number | null; stdout: string; stderr: string };

function fleetMigrate(databaseUrl: string): Promise<Exit> {
  return new Promise((resolve) => {
    execFile(
      process.execPath,
      [FLEET_BIN, "migrate"],
      {
        cwd: ROOT,
        env: {
          ...process.env,
          DATABASE_URL: databaseUrl,
          REDIS_URL,
          FLEET_PREFIX: `t-mf-${randomUUID().slice(0, 8)}`,
        },
        timeout: 60_000,
      },
      (error, stdout, stderr) => {
        const code = error ? (typeof error.code === "number" ? error.code : null) : 0;
        resolve({ code, stdout, stderr });
      },
    );
  });
}

describe("fleet migrate when a migration fails", () => {
  const admin = postgres(ADMIN_URL, { max: 1, onnotice: () => {} });
  const name = `fleet_t_migfail_${randomUUID().slice(0, 8)}`;
  const url = new URL(ADMIN_URL);
  url.pathname = `/${name}`;
  afterAll(async () => {
    await admin.unsafe(`drop database if exists "${name}" with (force)`);
    await admin.end();
  });

  it("says which migration failed and Postgres's reason, on one line, and applies none", async () => {
    await admin.unsafe(`create database "${name}"`);
    const sql = postgres(url.toString(), { max: 1, onnotice: () => {} });
    try {
      await sql`create table sessions (sid text primary key, data jsonb)`;
    } finally {
      await sql.end();
    }
    const exit = await fleetMigrate(url.toString());
    expect(exit.code).toBe(1);
    const lines = exit.stderr.trim().split("\n");
    expect(lines, exit.stderr).toHaveLength(1);
    expect(lines[0]).toMatch(
      /^fleet migrate: migration 0000_init failed: relation "sessions" already exists \(42P07\)/,
    );
    expect(lines[0]).toContain("no migration of this run was applied");
    const check = postgres(url.toString(), { max: 1, onnotice: () => {} });
    try {
      const [row] = await check<{ n: number }[]>`select count(*)::int as n from drizzle.__drizzle_migrations`;
      expect(row!.n).toBe(0);
      // The other application's table is as it was.
      const columns = await check<{ column_name: string }[]>`
        select column_name from information_schema.columns where table_name = 'sessions' order by 1`;
      expect(columns.map((c) => c.column_name)).toEqual(["data", "sid"]);
    } finally {
      await check.end();
    }
  });
});

describe("migrationFailure", () => {
  it("a statement of no migration (the migrations table's own set-up) is said as such", () => {
    // A role without CREATE on the database: drizzle's `CREATE SCHEMA IF NOT EXISTS "drizzle"`
    // fails before any migration (it said `migration (unknown) failed: …`).
    const cause = Object.assign(new Error("permission denied for database fleet"), { code: "42501" });
    const error = Object.assign(new Error('Failed query: CREATE SCHEMA IF NOT EXISTS "drizzle"\nparams: '), {
      query: 'CREATE SCHEMA IF NOT EXISTS "drizzle"',
      cause,
    });
    expect(migrationFailure(error, [{ tag: "0000_init", sql: 'CREATE TABLE "sessions" ();' }]).message).toBe(
      "the migrations table drizzle.__drizzle_migrations could not be set up: permission denied for database fleet (42501); no migration was applied",
    );
  });
});
