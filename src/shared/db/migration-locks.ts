/**
 * Migrations that wait for a lock (migrate.ts). An ALTER TABLE needs an ACCESS EXCLUSIVE lock:
 * while it waits for a transaction that has read the table, every later statement on that
 * table queues behind it, so a migration waiting for a long reader (a report, a psql session
 * left open) stopped the fleet for as long as that reader lived. So each attempt waits at most
 * `lock_timeout` (FLEET_MIGRATE_LOCK_TIMEOUT_MS), and the queued statements run while the next
 * attempt waits; after the last, the error names what holds the lock. The migrations of one
 * attempt share a transaction: one that times out leaves none applied.
 */
import type postgres from "postgres";

/** Attempts of a migration run that meets a lock it cannot take in time. */
export const MIGRATE_LOCK_ATTEMPTS = 5;

/** A session holding a lock a migration waited for. */
export type LockHolder = { pid: number; state: string | null; seconds: number; query: string };

/** Characters of a holder's statement the message shows. */
const QUERY_CHARS = 80;

/** Whether a migration's error (drizzle's, or Postgres's own) is a statement's `lock_timeout` (SQLSTATE 55P03). */
export function isLockTimeout(error: unknown): boolean {
  const cause = (error as { cause?: unknown }).cause;
  return (
    (error as { code?: unknown }).code === "55P03" ||
    (cause as { code?: unknown } | undefined)?.code === "55P03"
  );
}

/**
 * The sessions (not this one) holding a granted lock on a relation the statement names: its
 * quoted identifiers (`ALTER TABLE "runs" …`), the only names the shipped migrations use, or
 * on the table of an index it names (`DROP INDEX "sessions_idle_idx"`).
 */
export async function lockHolders(sql: postgres.Sql, statement: string): Promise<LockHolder[]> {
  const names = [...new Set([...statement.matchAll(/"([^"]+)"/g)].map((m) => m[1]!))];
  if (names.length === 0) return [];
  return await sql<LockHolder[]>`
    select distinct a.pid, a.state,
           floor(extract(epoch from now() - coalesce(a.xact_start, a.query_start, now())))::int as seconds,
           left(regexp_replace(coalesce(a.query, ''), '\\s+', ' ', 'g'), ${QUERY_CHARS}) as query
      from pg_locks l
      join pg_class c on c.oid = l.relation
      join pg_stat_activity a on a.pid = l.pid
     where l.granted and l.pid <> pg_backend_pid() and l.database = (select oid from pg_database where datname = current_database())
       and (c.relname = any(${names}::text[]) or c.oid in (
             select i.indrelid from pg_index i join pg_class x on x.oid = i.indexrelid
              where x.relname = any(${names}::text[])))
     order by seconds desc, a.pid`;
}

/** `pid 123 (idle in transaction for 42 s: "select …")`, each holder (pure). */
export function holdersText(holders: readonly LockHolder[]): string {
  if (holders.length === 0) return "held by a transaction that has ended since";
  return `held by ${holders
    .map((h) => `pid ${h.pid} (${h.state ?? "no state"} for ${h.seconds} s: ${JSON.stringify(h.query)})`)
    .join(", ")}`;
}

/** The line said between attempts (pure). */
export function waitingText(
  what: string,
  timeoutMs: number,
  holders: readonly LockHolder[],
  attempt: number,
): string {
  return `${what} is waiting for a lock: not granted within ${timeoutMs} ms, ${holdersText(holders)}; attempt ${attempt + 1} of ${MIGRATE_LOCK_ATTEMPTS} in ${timeoutMs} ms (other statements on the table run meanwhile)`;
}

/** The error of the last attempt (pure). */
export function lockFailure(
  what: string,
  timeoutMs: number,
  holders: readonly LockHolder[],
  cause: unknown,
): Error {
  const pids = holders.map((h) => h.pid);
  const end = pids.length > 0 ? `end that transaction (select pg_terminate_backend(${pids[0]})) or ` : "";
  return new Error(
    `${what} could not take its locks in ${MIGRATE_LOCK_ATTEMPTS} attempts of ${timeoutMs} ms (FLEET_MIGRATE_LOCK_TIMEOUT_MS): ${holdersText(holders)}; ${end}run fleet migrate again once it has ended; no migration of this run was applied (they share one transaction)`,
    { cause },
  );
}
