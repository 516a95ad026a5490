/**
 * Applies the committed migrations under a Postgres advisory lock, because drizzle's
 * migrator takes none: several processes may start at once and each calls this.
 */
import { existsSync } from "node:fs";
import { dirname, join } from "node:path";
import { fileURLToPath } from "node:url";
import { migrate } from "drizzle-orm/postgres-js/migrator";
import postgres from "postgres";
import type { Database } from "./client.js";

/** The package's `drizzle/` folder, found from the sources or from a build under `dist/`. */
function findMigrationsFolder(): string {
  let dir = dirname(fileURLToPath(import.meta.url));
  for (let i = 0; i < 6; i++) {
    const candidate = join(dir, "drizzle");
    if (existsSync(join(candidate, "meta", "_journal.json"))) return candidate;
    dir = dirname(dir);
  }
  throw new Error("cannot find the drizzle/ migrations folder of agent-fleet");
}

export const MIGRATIONS_FOLDER = findMigrationsFolder();

/** An arbitrary, fixed key for pg_advisory_lock: "agent-fleet migrate". */
const MIGRATION_LOCK_KEY = 727_274_001;

export async function migrateDatabase(database: Database): Promise<void> {
  // The lock lives on a connection of its own, so the pool (of any size) stays free for
  // the migrator.
  const lock = postgres(database.url, { max: 1, onnotice: () => {} });
  try {
    await lock`select pg_advisory_lock(${MIGRATION_LOCK_KEY})`;
    try {
      await migrate(database.db, { migrationsFolder: MIGRATIONS_FOLDER });
    } finally {
      await lock`select pg_advisory_unlock(${MIGRATION_LOCK_KEY})`;
    }
  } finally {
    await lock.end({ timeout: 5 });
  }
}
