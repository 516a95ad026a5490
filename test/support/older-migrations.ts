/** The migrations of an earlier release, for tests that upgrade a database from it. */
import { cp, mkdtemp, readFile, writeFile } from "node:fs/promises";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { drizzle } from "drizzle-orm/postgres-js";
import { migrate } from "drizzle-orm/postgres-js/migrator";
import postgres from "postgres";
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
