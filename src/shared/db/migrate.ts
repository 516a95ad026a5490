/**
 * Applies the committed migrations under a Postgres advisory lock, because drizzle's
 * migrator takes none: several processes may start at once and each calls this.
 */
import { existsSync, readFileSync } from "node:fs";
import { dirname, join } from "node:path";
import { fileURLToPath } from "node:url";
import { drizzle } from "drizzle-orm/postgres-js";
import { migrate } from "drizzle-orm/postgres-js/migrator";
import postgres from "postgres";
import { ValidationError } from "../errors.js";
import type { Database } from "./client.js";
import { dropInvalidPendingIndexes, type ShippedMigration } from "./invalid-indexes.js";
import { foreignJournalText, journalState, newerJournalText } from "./journal-state.js";
import {
  isLockTimeout,
  lockFailure,
  lockHolders,
  MIGRATE_LOCK_ATTEMPTS,
  waitingText,
} from "./migration-locks.js";

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

/** Default FLEET_MIGRATE_LOCK_TIMEOUT_MS: how long one attempt waits for a lock (migration-locks.ts). */
export const MIGRATE_LOCK_TIMEOUT_MS = 5_000;

export type MigrateOptions = {
  /** How long each attempt's statements wait for a lock (lock_timeout) before the next attempt. */
  lockTimeoutMs?: number;
  /** Told each time an attempt waited for a lock in vain, with what holds it. */
  onWait?: (line: string) => void;
};

/**
 * `newerThanOurs`: when a newer release migrated the database (none of ours to apply), what
 * to say of it (journal-state.ts); null otherwise.
 */
export type MigrateResult = { newerThanOurs: string | null };

export async function migrateDatabase(
  database: Database,
  options: MigrateOptions = {},
): Promise<MigrateResult> {
  // The lock lives on a connection of its own, so the pool (of any size) stays free for
  // the migrator.
  const lock = postgres(database.url, { max: 1, onnotice: () => {} });
  try {
    await lock`select pg_advisory_lock(${MIGRATION_LOCK_KEY})`;
    try {
      const migrations = shippedMigrations();
      const recorded = await recordedMigrations(lock);
      const journal = refuseForeignJournal(recorded, migrations);
      const newest = recorded.length > 0 ? Math.max(...recorded) : null;
      await migrateWithLockTimeout(database, lock, migrations, newest, options);
      return {
        newerThanOurs:
          journal.newer > 0 ? newerJournalText(journal.newer, migrations.at(-1)?.tag ?? "none") : null,
      };
    } finally {
      await lock`select pg_advisory_unlock(${MIGRATION_LOCK_KEY})`;
    }
  } finally {
    await lock.end({ timeout: 5 });
  }
}

/**
 * Drizzle's migrator on a connection of its own whose statements wait at most `lock_timeout`
 * for a lock; an attempt that times out (none of its migrations applied: one transaction) is
 * tried again after as long, MIGRATE_LOCK_ATTEMPTS times in all (migration-locks.ts).
 */
async function migrateWithLockTimeout(
  database: Database,
  lock: postgres.Sql,
  migrations: ShippedMigration[],
  newest: number | null,
  options: MigrateOptions,
): Promise<void> {
  const timeoutMs = options.lockTimeoutMs ?? MIGRATE_LOCK_TIMEOUT_MS;
  for (let attempt = 1; ; attempt++) {
    const runner = postgres(database.url, {
      max: 1,
      onnotice: () => {},
      connection: {
        application_name: database.applicationName ?? "fleet-migrate",
        lock_timeout: timeoutMs,
      },
    });
    try {
      // Its DROP INDEX locks the table as an ALTER does: it waits no longer either.
      await dropInvalidPendingIndexes(runner, migrations, newest);
      await migrate(drizzle(runner), { migrationsFolder: MIGRATIONS_FOLDER });
      return;
    } catch (error) {
      if (!isLockTimeout(error)) throw migrationFailure(error, migrations);
      const statement = String((error as { query?: unknown }).query ?? "");
      const tag = migrationOf(statement, migrations);
      // Not a migration's statement: the drop of an invalid index before them (invalid-indexes.ts).
      const what = tag
        ? `migration ${tag}`
        : `\`${statement.replace(/\s+/g, " ").slice(0, 80)}\` (before the migrations)`;
      const holders = await lockHolders(lock, statement);
      if (attempt >= MIGRATE_LOCK_ATTEMPTS) throw lockFailure(what, timeoutMs, holders, error);
      options.onWait?.(waitingText(what, timeoutMs, holders, attempt));
    } finally {
      await runner.end({ timeout: 5 });
    }
    await new Promise((resolve) => setTimeout(resolve, timeoutMs));
  }
}

/** The tag of the migration a statement belongs to (pure). */
function migrationOf(query: string, migrations: { tag: string; sql: string }[]): string | undefined {
  const statement = query.trim();
  return statement ? migrations.find((m) => m.sql.includes(statement))?.tag : undefined;
}

/** The `created_at` of each migration drizzle's table records (its errors thrown as they come). */
export async function readRecordedMigrations(sql: postgres.Sql): Promise<number[]> {
  const rows = await sql<
    { at: string | null }[]
  >`select created_at::text as at from drizzle.__drizzle_migrations`;
  return rows.flatMap((r) => (r.at === null ? [] : [Number(r.at)]));
}

/** The `created_at` of each migration recorded; none when drizzle's table is not there yet. */
async function recordedMigrations(sql: postgres.Sql): Promise<number[]> {
  try {
    return await readRecordedMigrations(sql);
  } catch (error) {
    const code = (error as { code?: string }).code;
    if (code === "42P01" || code === "3F000") return [];
    throw error;
  }
}

/** Drizzle would apply none of ours to a table another application's newer migrations share. */
function refuseForeignJournal(
  recorded: number[],
  migrations: ShippedMigration[],
): ReturnType<typeof journalState> {
  const journal = journalState(
    recorded,
    migrations.map((m) => m.when),
  );
  if (journal.state === "foreign")
    throw new ValidationError(
      "DATABASE_URL",
      foreignJournalText(journal.ours, migrations.length, journal.newest),
    );
  return journal;
}

/** Each migration this code ships, as drizzle/meta/_journal.json lists it: its tag (`0000_init`) and `when`. */
export function shippedJournal(): { tag: string; when: number }[] {
  const journal = JSON.parse(readFileSync(join(MIGRATIONS_FOLDER, "meta", "_journal.json"), "utf8")) as {
    entries: { tag: string; when: number }[];
  };
  return journal.entries;
}

/** Each migration this code ships: its tag (`0000_init`), its `when` and its SQL. */
function shippedMigrations(): ShippedMigration[] {
  return shippedJournal().map(({ tag, when }) => ({
    tag,
    when,
    sql: readFileSync(join(MIGRATIONS_FOLDER, `${tag}.sql`), "utf8"),
  }));
}

/**
 * The error a failed migration is reported with: which migration, Postgres's reason and its
 * SQLSTATE, on one line. Drizzle's own says "Failed query:" and the whole statement (a CREATE
 * TABLE over 19 lines), and not the reason, which is only its `cause`. The migrations of one
 * run share a transaction, so none of them is applied (pure).
 */
export function migrationFailure(error: unknown, migrations: { tag: string; sql: string }[]): Error {
  const query = (error as { query?: unknown }).query;
  const cause = (error as { cause?: unknown }).cause;
  if (typeof query !== "string" || !(cause instanceof Error)) return error as Error;
  const tag = migrationOf(query, migrations);
  const code = (cause as { code?: unknown }).code;
  const reason = `${cause.message.replace(/\s+/g, " ")}${typeof code === "string" ? ` (${code})` : ""}`;
  // A statement of no migration: drizzle's set-up of its table, before any migration.
  if (tag === undefined)
    return new Error(
      `the migrations table drizzle.__drizzle_migrations could not be set up: ${reason}; no migration was applied`,
      { cause: error },
    );
  return new Error(
    `migration ${tag} failed: ${reason}; no migration of this run was applied (they share one transaction)`,
    { cause: error },
  );
}
