/** The migrations of an earlier release, for tests that upgrade a database from it. */
import { randomUUID } from "node:crypto";
import { cp, mkdtemp, readFile, rm, writeFile } from "node:fs/promises";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { drizzle } from "drizzle-orm/postgres-js";
import { migrate } from "drizzle-orm/postgres-js/migrator";
import postgres from "postgres";
import { afterAll } from "vitest";
import { MIGRATIONS_FOLDER } from "../../src/shared/db/migrate.js";

/**
 * A copy of the shipped migrations folder (in a new temporary folder, the caller removes it)
 * whose journal stops before the migration whose tag starts with `prefix` (e.g. "0013_"): what
 * the release before that migration shipped.
 */
export async function migrationsBefore(prefix: string): Promise<string> {
  const older = await mkdtemp(join(tmpdir(), `fleet-before-${prefix.replace(/_$/, "")}-`));
  await cp(MIGRATIONS_FOLDER, older, { recursive: true });
  const journalPath = join(older, "meta", "_journal.json");
  const journal = JSON.parse(await readFile(journalPath, "utf8")) as { entries: { tag: string }[] };
  journal.entries = journal.entries.slice(
    0,
    journal.entries.findIndex((e) => e.tag.startsWith(prefix)),
  );
  await writeFile(journalPath, JSON.stringify(journal));
  return older;
}

/**
 * Creates the database `name` (through `admin`) and applies the migrations of `folder` to it,
 * at `url`: a database of the release that shipped them. `then` runs on it before it closes.
 */
export async function createDatabaseMigratedBy(
  admin: postgres.Sql,
  name: string,
  url: string,
  folder: string,
  then: (sql: postgres.Sql) => Promise<unknown> = async () => {},
): Promise<void> {
  await admin.unsafe(`create database "${name}"`);
  const sql = postgres(url, { max: 1, onnotice: () => {} });
  try {
    await migrate(drizzle(sql), { migrationsFolder: folder });
    await then(sql);
  } finally {
    await sql.end();
  }
}

const ADMIN_URL = process.env.TEST_ADMIN_DATABASE_URL ?? "postgres://postgres@127.0.0.1:5432/postgres";

/**
 * For a describe block whose tests upgrade a database from an earlier release: an admin
 * connection, a new database's name (`fleet_t_<label>_…`) and URL, and a list of folders to
 * remove. After the block the database is dropped, the connection closed and the folders removed.
 */
export function useUpgradedDatabase(label: string): {
  admin: postgres.Sql;
  name: string;
  url: URL;
  dirs: string[];
} {
  const admin = postgres(ADMIN_URL, { max: 1, onnotice: () => {} });
  const name = `fleet_t_${label}_${randomUUID().slice(0, 8)}`;
  const url = new URL(ADMIN_URL);
  url.pathname = `/${name}`;
  const dirs: string[] = [];
  afterAll(async () => {
    await admin.unsafe(`drop database if exists "${name}" with (force)`);
    await admin.end();
    for (const dir of dirs) await rm(dir, { recursive: true, force: true });
  });
  return { admin, name, url, dirs };
}
