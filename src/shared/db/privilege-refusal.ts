/**
 * A Postgres refusal for want of a privilege (SQLSTATE 42501, insufficient_privilege) while
 * `fleet migrate` creates DATABASE_URL's database or the fleet's tables in it, in the words an
 * operator fixes it by: which user, which database, and the statement a superuser runs. It was
 * Postgres's message alone ("permission denied to create database"), exit 1, naming neither
 * DATABASE_URL nor the GRANT (test/migrate-without-privileges.test.ts).
 */
import { ValidationError } from "../errors.js";

/** The SQLSTATE of the error or of one of its causes (drizzle wraps Postgres's error). */
function sqlState(error: unknown): string | undefined {
  for (let e = error, depth = 0; e && depth < 5; e = (e as { cause?: unknown }).cause, depth++) {
    const code = (e as { code?: unknown }).code;
    if (typeof code === "string" && /^[0-9A-Z]{5}$/.test(code)) return code;
  }
  return undefined;
}

/** Postgres's own words: the innermost message that carries the SQLSTATE. */
function postgresMessage(error: unknown): string {
  for (let e = error, depth = 0; e && depth < 5; e = (e as { cause?: unknown }).cause, depth++)
    if (typeof (e as { code?: unknown }).code === "string") return (e as Error).message;
  return (error as Error).message;
}

const quoted = (name: string) => `"${name.replace(/"/g, '""')}"`;

/**
 * The ValidationError (DATABASE_URL) for `error` when it is a privilege refusal, else
 * undefined. `step`: creating the database, or creating the tables in it (pure).
 */
export function privilegeRefusal(
  url: string,
  step: "create" | "migrate",
  error: unknown,
): ValidationError | undefined {
  if (sqlState(error) !== "42501") return undefined;
  const parsed = new URL(url);
  const user = decodeURIComponent(parsed.username) || "postgres";
  const database = decodeURIComponent(parsed.pathname.slice(1)) || "postgres";
  const reason = postgresMessage(error);
  if (step === "create")
    return new ValidationError(
      "DATABASE_URL",
      `the Postgres user "${user}" may not create the database "${database}" (${reason}): ` +
        `create it for the user (CREATE DATABASE ${quoted(database)} OWNER ${quoted(user)}) ` +
        `or give the user CREATEDB (ALTER ROLE ${quoted(user)} CREATEDB)`,
    );
  return new ValidationError(
    "DATABASE_URL",
    `the Postgres user "${user}" may not create the fleet's tables in the database "${database}" (${reason}): ` +
      `make the user its owner (ALTER DATABASE ${quoted(database)} OWNER TO ${quoted(user)}) ` +
      `or GRANT CREATE ON DATABASE ${quoted(database)} TO ${quoted(user)} and GRANT CREATE ON SCHEMA public TO ${quoted(user)}`,
  );
}
