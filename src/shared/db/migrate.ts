/**
 * Applies the committed migrations under a Postgres advisory lock, because drizzle's
 * migrator takes none: several processes may start at once and each calls this.
 */
import { fileURLToPath } from "node:url";
import { migrate } from "drizzle-orm/postgres-js/migrator";
import type { Database } from "./client.js";

export const MIGRATIONS_FOLDER = fileURLToPath(new URL("../../../drizzle", import.meta.url));

/** An arbitrary, fixed key for pg_advisory_lock: "agent-fleet migrate". */
const MIGRATION_LOCK_KEY = 727_274_001;

export async function migrateDatabase(database: Database): Promise<void> {
  const reserved = await database.sql.reserve();
  try {
    await reserved`select pg_advisory_lock(${MIGRATION_LOCK_KEY})`;
    try {
      await migrate(database.db, { migrationsFolder: MIGRATIONS_FOLDER });
    } finally {
      await reserved`select pg_advisory_unlock(${MIGRATION_LOCK_KEY})`;
    }
  } finally {
    reserved.release();
  }
}
