/**
 * Waiting for the xmin horizon, for tests that count what a scan reads of row versions a
 * committed update left dead (test/plans-after-batch.test.ts).
 *
 * An index scan marks an entry dead (LP_DEAD, so that later scans skip it) only when the
 * versions it points to are dead to every snapshot, and Postgres decides that conservatively:
 * a transaction running anywhere in the cluster holds it back (its id is in every snapshot),
 * and so, as seen on Postgres 15, does a snapshot held open in another database (a connection
 * opened meanwhile marked nothing). So what such a test counts depends on what every other
 * connection of the cluster does at that moment (a test file alongside creating its database,
 * another fleet): it has to wait until nothing in the cluster can still see before the update.
 */
import type { Database } from "../../src/shared/db/client.js";

/** The transaction id of the caller's current transaction, as `pg_current_xact_id()` gives it. */
export type Xid = string;

/** One backend, prepared transaction or slot that still holds the horizon at or before an xid. */
type Holder = Record<string, unknown>;

/**
 * What holds the horizon at or before `xid`: running transactions with an id up to `xid`
 * (prepared ones too: they are in every snapshot, `pg_snapshot_xmin`), and snapshots that
 * see before it (`backend_xmin`, in any database, and replication slots). Empty once every
 * version `xid` made dead is dead to all: an index scan after that marks their entries.
 */
async function holdersOf({ sql }: Database, xid: Xid): Promise<Holder[]> {
  // `age(x) >= age(u)`: x is u or older (xid has no ordering; age counts back from now).
  return sql<Holder[]>`
    select 'backend' as what, datname, pid, backend_type, state, backend_xid::text as xid,
           backend_xmin::text as xmin, left(query, 80) as query
      from pg_stat_activity
     where pid <> pg_backend_pid()
       and (age(backend_xmin) >= age(${xid}::xid8::xid) or age(backend_xid) >= age(${xid}::xid8::xid))
    union all
    select 'prepared transaction', database, null, null, gid, transaction::text, null, null
      from pg_prepared_xacts where age(transaction) >= age(${xid}::xid8::xid)
    union all
    select 'replication slot', database, active_pid, slot_type, slot_name, null, xmin::text, null
      from pg_replication_slots where age(xmin) >= age(${xid}::xid8::xid)
    union all
    select 'snapshot', current_database(), pg_backend_pid(), null, null, null,
           pg_snapshot_xmin(pg_current_snapshot())::text, null
     where pg_snapshot_xmin(pg_current_snapshot()) <= ${xid}::xid8`;
}

/**
 * Resolves once nothing in the cluster holds the horizon at or before `xid` (see `holdersOf`);
 * polled on `db`, which should not be a connection whose scans are measured. Fails after
 * `timeoutMs` naming what still holds it.
 */
export async function untilDeadToAll(db: Database, xid: Xid, timeoutMs = 20_000): Promise<void> {
  const deadline = Date.now() + timeoutMs;
  for (;;) {
    const holders = await holdersOf(db, xid);
    if (holders.length === 0) return;
    if (Date.now() > deadline)
      throw new Error(
        `timed out after ${timeoutMs} ms waiting for the xmin horizon to pass transaction ${xid}; held by ${JSON.stringify(holders)}`,
      );
    await new Promise((resolve) => setTimeout(resolve, 25));
  }
}
