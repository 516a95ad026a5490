/**
 * A Database whose every statement sent to Postgres is recorded, `BEGIN` and `COMMIT` included
 * (postgres.js's `debug` hook): for tests that prove a change by the statements it sends
 * rather than by time.
 */
import { drizzle } from "drizzle-orm/postgres-js";
import postgres from "postgres";
import type { Database } from "../../src/shared/db/client.js";
import * as schema from "../../src/shared/db/schema.js";

export function countedDatabase(url: string): { database: Database; statements: string[] } {
  const statements: string[] = [];
  const sql = postgres(url, {
    max: 2,
    onnotice: () => {},
    fetch_types: false,
    debug: (_connection, query) => statements.push(query.trim().replace(/\s+/g, " ")),
  });
  return {
    database: { url, sql, db: drizzle(sql, { schema }), close: () => sql.end({ timeout: 5 }) },
    statements,
  };
}
