/**
 * Migrations 0012 and 0013 create their indexes `IF NOT EXISTS`, so that an operator can build
 * them first with CREATE INDEX CONCURRENTLY on a large table. A concurrent build that fails or
 * is cancelled leaves an index of that name marked invalid (never read, still written to), and
 * `IF NOT EXISTS` would skip it for good. Before migrating, such an index of a migration not
 * applied yet is dropped, and its migration builds it.
 */
import type postgres from "postgres";

export type ShippedMigration = { tag: string; when: number; sql: string };

/** The names of the indexes `sql` creates `IF NOT EXISTS` (pure). */
export function ifNotExistsIndexes(sql: string): string[] {
  return [...sql.matchAll(/CREATE\s+(?:UNIQUE\s+)?INDEX\s+IF\s+NOT\s+EXISTS\s+"([^"]+)"/gi)].map(
    (m) => m[1]!,
  );
}

/**
 * Drops the invalid indexes that a pending migration (newer than `applied`, the newest
 * recorded; null: none) creates `IF NOT EXISTS`; returns their names.
 */
export async function dropInvalidPendingIndexes(
  sql: postgres.Sql,
  migrations: ShippedMigration[],
  applied: number | null,
): Promise<string[]> {
  const names = migrations
    .filter((m) => applied === null || m.when > applied)
    .flatMap((m) => ifNotExistsIndexes(m.sql));
  if (names.length === 0) return [];
  const invalid = await sql<{ name: string }[]>`
    select c.relname as name from pg_index i join pg_class c on c.oid = i.indexrelid
     where not i.indisvalid and c.relname = any(${names}) and pg_table_is_visible(c.oid)`;
  for (const { name } of invalid) await sql`drop index ${sql(name)}`;
  return invalid.map((i) => i.name);
}
