/**
 * Migrations 0012 and 0013 create their indexes `IF NOT EXISTS`, so that an operator can build
 * them first with CREATE INDEX CONCURRENTLY on a large table (docs/performance.md). A
 * concurrent build that fails or is cancelled leaves an INVALID index of that name behind
 * (Postgres's rule); the migration then skipped it and was recorded as applied, leaving
 * `sessions_idle_idx` invalid for good: no plan reads it (each retention pass scans
 * `sessions`), and nothing said so. Now `fleet migrate` drops such an index, of a migration
 * not applied yet, and the migration builds it.
 */
import { randomUUID } from "node:crypto";
import { readFile, rm } from "node:fs/promises";
import { join } from "node:path";
import { drizzle } from "drizzle-orm/postgres-js";
import { migrate } from "drizzle-orm/postgres-js/migrator";
import postgres from "postgres";
import { afterAll, describe, expect, it } from "vitest";
import { openDatabase } from "../src/shared/db/client.js";
import { ifNotExistsIndexes } from "../src/shared/db/invalid-indexes.js";
import { MIGRATIONS_FOLDER, migrateDatabase } from "../src/shared/db/migrate.js";
import { migrationsBefore } from "./support/older-migrations.js";

const ADMIN_URL = process.env.TEST_ADMIN_DATABASE_URL ?? "postgres://postgres@127.0.0.1:5432/postgres";
const IDLE_INDEX = `CREATE INDEX CONCURRENTLY "sessions_idle_idx" ON "sessions" USING btree ("updated_at","id") WHERE "sessions"."batch_id" is null and not ("sessions"."status" = 'active' and "sessions"."run_started" and "sessions"."tail_phase" = 'open')`;

describe("an index left invalid by a failed CREATE INDEX CONCURRENTLY", () => {
  const admin = postgres(ADMIN_URL, { max: 1, onnotice: () => {} });
  const name = `fleet_t_invidx_${randomUUID().slice(0, 8)}`;
  const url = new URL(ADMIN_URL);
  url.pathname = `/${name}`;
  let older: string | undefined;
  afterAll(async () => {
    await admin.unsafe(`drop database if exists "${name}" with (force)`);
    await admin.end();
    if (older) await rm(older, { recursive: true, force: true });
  });

  it("the shipped migrations' IF NOT EXISTS indexes are the ones found", async () => {
    const sql = await Promise.all(
      ["0012_session_run_lookups.sql", "0013_data_deletion.sql"].map((f) =>
        readFile(join(MIGRATIONS_FOLDER, f), "utf8"),
      ),
    );
    expect(sql.flatMap(ifNotExistsIndexes)).toEqual(["runs_session_state_idx", "sessions_idle_idx"]);
  });

  it("is built again by the migration that creates it", async () => {
    // A database of the release before migration 0013.
    older = await migrationsBefore("0013_");
    await admin.unsafe(`create database "${name}"`);
    const writer = postgres(url.toString(), { max: 1, onnotice: () => {} });
    const builder = postgres(url.toString(), { max: 1, onnotice: () => {} });
    try {
      await migrate(drizzle(writer), { migrationsFolder: older });
      // The operator's concurrent build, cancelled (here by its statement_timeout) while it
      // waits for a transaction that writes to `sessions`: the index stays, marked invalid.
      await writer.begin(async (tx) => {
        await tx`insert into sessions (id, agent) values ('s1', '{}'::jsonb)`;
        await builder`set statement_timeout = 1000`;
        await expect(builder.unsafe(IDLE_INDEX)).rejects.toThrow(/statement timeout/);
      });
      const [before] = await builder<{ valid: boolean }[]>`
        select indisvalid as valid from pg_index where indexrelid = 'sessions_idle_idx'::regclass`;
      expect(before!.valid).toBe(false);
    } finally {
      await writer.end();
      await builder.end();
    }
    const database = openDatabase(url.toString(), { max: 2 });
    try {
      await migrateDatabase(database);
      const rows = await database.sql<{ valid: boolean }[]>`
        select indisvalid as valid from pg_index where indexrelid = 'sessions_idle_idx'::regclass`;
      expect(rows).toEqual([{ valid: true }]);
    } finally {
      await database.close();
    }
  }, 60_000);
});
