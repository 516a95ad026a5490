/** One Postgres pool (postgres.js) and its Drizzle wrapper. */
import { drizzle, type PostgresJsDatabase } from "drizzle-orm/postgres-js";
import postgres from "postgres";
import { watchable, watchedSockets } from "./dead-links.js";
import { endCancelling, newTag, taggedConnection } from "./own-statements.js";
import * as schema from "./schema.js";
import { requestedTls } from "./tls-negotiation.js";

export type Database = {
  /** The connection URL (for a dedicated connection, e.g. the migration lock). */
  url: string;
  sql: postgres.Sql;
  db: PostgresJsDatabase<typeof schema>;
  /** What this pool's connections are named in pg_stat_activity (own-statements.ts). */
  applicationName?: string;
  /** Refuses new statements, cancels those still running in Postgres, and ends the pool. */
  close: () => Promise<void>;
};

/**
 * `role`: the start of the connections' application_name (`fleet-<role> <tag>`).
 * `silenceMs`: a connection waiting that long for an answer with nothing back is dropped and
 * its statements fail as Postgres unavailable (dead-links.ts); absent or 0: never.
 */
export function openDatabase(
  url: string,
  options: { max?: number; role?: string; silenceMs?: number } = {},
): Database {
  const tagged = taggedConnection(url, options.role ?? "client", newTag());
  const sql = postgres(tagged.url, {
    max: options.max ?? 10,
    onnotice: () => {},
    // Connections dropped by the server (restart, pg_terminate_backend) are replaced on
    // the next query; idle ones are recycled so a long-lived worker never holds a dead one.
    idle_timeout: 60,
    connect_timeout: 10,
    // After a failed connect postgres.js waits before the next, longer each time (3^n / 100 s,
    // up to 20 s), and a statement that needs a connection waits with it: after 15 s of outage
    // an API request waited 11 s for its 503, and the first after it 1.3-2.6 s for its answer.
    backoff: reconnectDelaySeconds,
    // postgres.js otherwise looks up array types on each new connection, outside any query:
    // a connection killed at that moment (pg_terminate_backend) rejected a promise nobody
    // awaited and crashed the process. The schema uses only built-in types.
    fetch_types: false,
    connection: { application_name: tagged.applicationName },
    // TLS, if the URL asks for it, is negotiated by the watched sockets (so that they see the
    // cleartext): postgres.js must not do it again on them. Its `ssl` option wins over the URL's.
    ...(options.silenceMs && watchable(url)
      ? { socket: watchedSockets(options.silenceMs, requestedTls(tagged.url)), ssl: false }
      : {}),
  });
  const db = drizzle(sql, { schema });
  return {
    url,
    sql,
    db,
    applicationName: tagged.applicationName,
    close: () => endCancelling(sql, tagged.url, tagged.applicationName),
  };
}

/**
 * postgres.js `backoff`: seconds before a connection that failed tries again, after the
 * pool's `retries` failures in a row (reset by a connect that succeeds): 0.1 s doubling up to
 * 1 s, less up to half at random (so a fleet's connections do not all knock at once). At most
 * one attempt a second for each connection a statement waits for (pure but for the jitter).
 */
export function reconnectDelaySeconds(retries: number, random: () => number = Math.random): number {
  return (0.5 + random() / 2) * Math.min(0.1 * 2 ** Math.max(0, retries - 1), 1);
}

/** The database name in a postgres URL. */
export function databaseName(url: string): string {
  return decodeURIComponent(new URL(url).pathname.replace(/^\//, "")) || "postgres";
}

/** Creates the URL's database when it does not exist yet (the demo owns its database). */
export async function ensureDatabase(url: string): Promise<void> {
  const name = databaseName(url);
  const admin = new URL(url);
  admin.pathname = "/postgres";
  const sql = postgres(admin.toString(), { max: 1, onnotice: () => {}, connect_timeout: 10 });
  try {
    const rows = await sql`select 1 from pg_database where datname = ${name}`;
    if (rows.length === 0) {
      await sql.unsafe(`create database "${name.replace(/"/g, '""')}"`).catch((error: { code?: string }) => {
        // Created by a concurrent caller: 42P04 once it exists, 23505 while both race on the catalog.
        if (error.code !== "42P04" && error.code !== "23505") throw error;
      });
    }
  } finally {
    await sql.end({ timeout: 5 });
  }
}
