/**
 * One database, one fleet. A fleet is its FLEET_PREFIX: its queues, leases and worker
 * liveness live under that prefix in Redis, while sessions and runs live in Postgres with no
 * prefix. Two fleets on one database would each take the other's workers for dead (the
 * sweeper sees runs whose workers it cannot find), end their runs `crashed` and resume their
 * sessions. So the first process of a fleet records its prefix in the database, and every
 * process of another prefix is refused at start.
 */
import type { Database } from "../db/client.js";
import { databaseName } from "../db/client.js";
import { ValidationError } from "../errors.js";

/**
 * Records `prefix` as this database's fleet when none is recorded yet; throws a
 * ValidationError naming FLEET_PREFIX when the database belongs to another fleet, and one
 * naming DATABASE_URL when the server is read-only.
 */
export async function claimFleet(database: Pick<Database, "sql" | "url">, prefix: string): Promise<void> {
  const [row] = await database.sql<{ prefix: string }[]>`
    with claimed as (
      insert into fleet_identity (id, prefix) values (1, ${prefix})
      on conflict (id) do nothing
      returning prefix
    )
    select prefix from claimed
    union all
    select prefix from fleet_identity where id = 1`.catch((error: unknown) => {
    // 25006: a standby (DATABASE_URL still names it after a failover) or default_transaction_read_only.
    if ((error as { code?: unknown }).code !== "25006") throw error;
    throw new ValidationError(
      "DATABASE_URL",
      `database "${databaseName(database.url)}" is read-only (a standby, or default_transaction_read_only = on): ` +
        "the fleet writes to it; point DATABASE_URL at the primary",
    );
  });
  const owner = row?.prefix ?? prefix;
  if (owner === prefix) return;
  throw new ValidationError(
    "FLEET_PREFIX",
    `database "${databaseName(database.url)}" belongs to the fleet with FLEET_PREFIX=${owner}, not ${prefix}: ` +
      "two fleets on one database would take each other's workers for dead and resume each other's sessions. " +
      `Give this fleet its own database (DATABASE_URL), or run it as FLEET_PREFIX=${owner}`,
  );
}

/**
 * Makes `prefix` this database's fleet whatever was recorded: only for a database one
 * command owns outright (`fleet demo`'s own database).
 */
export async function takeFleet(database: Pick<Database, "sql">, prefix: string): Promise<void> {
  await database.sql`
    insert into fleet_identity (id, prefix) values (1, ${prefix})
    on conflict (id) do update set prefix = excluded.prefix`;
}
