/**
 * A database whose `drizzle.__drizzle_migrations` another Drizzle application shares, with a
 * migration newer than this release's newest. Drizzle applies only the migrations newer than
 * the newest recorded, so it applied none of the fleet's: `fleet migrate` said "migrations
 * applied", the roles' check (newest recorded ≥ newest shipped) let them start, and their first
 * statement failed (`fleet keys list`: `relation "api_keys" does not exist`). Now both refuse,
 * naming DATABASE_URL and saying why.
 */
import { randomUUID } from "node:crypto";
import postgres from "postgres";
import { afterAll, describe, expect, it } from "vitest";
import { openDatabase } from "../src/shared/db/client.js";
import { migrateDatabase } from "../src/shared/db/migrate.js";
import { checkDatabase } from "../src/shared/preflight.js";

const ADMIN_URL = process.env.TEST_ADMIN_DATABASE_URL ?? "postgres://postgres@127.0.0.1:5432/postgres";
const FOREIGN = /DATABASE_URL: .*drizzle\.__drizzle_migrations holds another application's migrations/;

describe("a migrations table shared with another Drizzle application", () => {
  const admin = postgres(ADMIN_URL, { max: 1, onnotice: () => {} });
  const name = `fleet_t_sharedmig_${randomUUID().slice(0, 8)}`;
  const url = new URL(ADMIN_URL);
  url.pathname = `/${name}`;
  afterAll(async () => {
    await admin.unsafe(`drop database if exists "${name}" with (force)`);
    await admin.end();
  });

  it("fleet migrate and the roles' check refuse it; nothing is applied", async () => {
    await admin.unsafe(`create database "${name}"`);
    const sql = postgres(url.toString(), { max: 1, onnotice: () => {} });
    try {
      await sql`create schema drizzle`;
      await sql`create table drizzle.__drizzle_migrations (id serial primary key, hash text not null, created_at bigint)`;
      // The other application's migration, generated after this release's newest.
      await sql`insert into drizzle.__drizzle_migrations (hash, created_at) values ('other-app', 1900000000000)`;
      const database = openDatabase(url.toString(), { max: 2 });
      try {
        await expect(migrateDatabase(database)).rejects.toThrow(FOREIGN);
      } finally {
        await database.close();
      }
      await expect(checkDatabase(url.toString())).rejects.toThrow(FOREIGN);
      const [tables] = await sql<{ n: number }[]>`
        select count(*)::int as n from information_schema.tables where table_schema = 'public'`;
      expect(tables!.n).toBe(0);
    } finally {
      await sql.end();
    }
  }, 60_000);
});
