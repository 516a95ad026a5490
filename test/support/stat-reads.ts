/**
 * What statements read, from Postgres's statistics, for tests that prove a plan by the rows and
 * index entries it reads rather than by time (test/plans-*.test.ts).
 */
import type { Database } from "../../src/shared/db/client.js";

/** Makes what `connections` counted so far visible to the next read of the statistics on `reader`. */
async function flushStats(connections: readonly Database[], reader: Database): Promise<void> {
  for (const { sql } of connections) {
    await sql`select pg_stat_force_next_flush()`;
    await sql`select 1`; // its end flushes what the statements before it counted
  }
  await reader.sql`select pg_stat_clear_snapshot()`;
}

/**
 * `read()`'s counters after `fn` less before it, with what `connections` (by default the reader
 * alone) counted flushed before each reading.
 */
export async function readsWhile<K extends string>(
  reader: Database,
  read: () => Promise<Record<K, number>>,
  fn: () => Promise<unknown>,
  connections: readonly Database[] = [reader],
): Promise<Record<K, number>> {
  await flushStats(connections, reader);
  const before = await read();
  await fn();
  await flushStats(connections, reader);
  const after = await read();
  return Object.fromEntries(
    Object.entries<number>(after).map(([key, value]) => [key, value - before[key as K]]),
  ) as Record<K, number>;
}

/** Index entries (`index`) and table rows (`seq`) read in `tables` while `fn` runs. */
function tableReads(
  db: Database,
  tables: readonly string[],
  fn: () => Promise<unknown>,
): Promise<{ index: number; seq: number }> {
  return readsWhile(
    db,
    async () => {
      const [row] = await db.sql<{ index: string; seq: string }[]>`
        select (select coalesce(sum(idx_tup_read), 0) from pg_stat_user_indexes
                 where relname = any(string_to_array(${tables.join(",")}, ','))) as index,
               (select coalesce(sum(seq_tup_read), 0) from pg_stat_user_tables
                 where relname = any(string_to_array(${tables.join(",")}, ','))) as seq`;
      return { index: Number(row!.index), seq: Number(row!.seq) };
    },
    fn,
  );
}

/** Index entries (`index`) and table rows (`seq`) read in `runs` and `sessions` while `fn` runs. */
export function runsAndSessionsReads(
  db: Database,
  fn: () => Promise<unknown>,
): Promise<{ index: number; seq: number }> {
  return tableReads(db, ["runs", "sessions"], fn);
}

/**
 * Index entries (`index`) and, read by table scans, rows (`seq`) of `messages` read while `fn`
 * runs (on `db`, a database of one connection).
 */
export function messageIndexReads(
  db: Database,
  fn: () => Promise<unknown>,
): Promise<{ index: number; seq: number }> {
  return tableReads(db, ["messages"], fn);
}
