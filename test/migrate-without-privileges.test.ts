/**
 * `fleet migrate` as a Postgres user that may not create what it needs: a role without
 * CREATEDB naming a database that does not exist yet, and a role without CREATE on a database
 * someone else made for it (Postgres 15 gives PUBLIC no CREATE on schema `public` either). It
 * exited 1 with Postgres's words alone, "fleet migrate: permission denied to create database"
 * or "the migrations table … could not be set up: permission denied for database …", naming
 * neither DATABASE_URL nor what to grant (found by hand). Now: one line naming DATABASE_URL,
 * the user, the database and the GRANT that fixes it, exit 2, no password.
 */
import { randomUUID } from "node:crypto";
import postgres from "postgres";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { runFleetCli } from "./support/fleet-cli.js";

const ADMIN_URL = process.env.TEST_ADMIN_DATABASE_URL ?? "postgres://postgres@127.0.0.1:5432/postgres";

describe("fleet migrate as a user without the privileges it needs", () => {
  const id = randomUUID().slice(0, 8);
  const role = `fleet_noprivs_${id}`;
  const missing = `noprivs_missing_${id}`;
  const foreign = `noprivs_foreign_${id}`;
  const password = "s3cret-pw";
  const admin = postgres(ADMIN_URL, { max: 1, onnotice: () => {} });
  const urlOf = (database: string) => {
    const url = new URL(ADMIN_URL);
    url.username = role;
    url.password = password;
    url.pathname = `/${database}`;
    return url.toString();
  };

  beforeAll(async () => {
    await admin.unsafe(`create role ${role} login password '${password}'`);
    await admin.unsafe(`create database ${foreign}`);
  });
  afterAll(async () => {
    await admin.unsafe(`drop database if exists ${foreign}`);
    await admin.unsafe(`drop database if exists ${missing}`);
    await admin.unsafe(`drop role if exists ${role}`);
    await admin.end();
  });

  it("says what to grant, naming DATABASE_URL, exit 2, for a database it may not create or migrate", async () => {
    const cases = [
      {
        database: missing,
        line:
          `fleet migrate: DATABASE_URL: the Postgres user "${role}" may not create the database "${missing}" ` +
          `(permission denied to create database): create it for the user (CREATE DATABASE "${missing}" OWNER "${role}") ` +
          `or give the user CREATEDB (ALTER ROLE "${role}" CREATEDB)`,
      },
      {
        database: foreign,
        line:
          `fleet migrate: DATABASE_URL: the Postgres user "${role}" may not create the fleet's tables in the database "${foreign}" ` +
          `(permission denied for database ${foreign}): make the user its owner (ALTER DATABASE "${foreign}" OWNER TO "${role}") ` +
          `or GRANT CREATE ON DATABASE "${foreign}" TO "${role}" and GRANT CREATE ON SCHEMA public TO "${role}"`,
      },
    ];
    for (const { database, line } of cases) {
      const result = await runFleetCli(
        ["migrate"],
        { DATABASE_URL: urlOf(database), FLEET_DEBUG: undefined },
        30_000,
      );
      expect(result.code, result.stdout + result.stderr).toBe(2);
      expect(result.stdout + result.stderr).not.toContain(password);
      const lines = result.stderr.trim().split("\n");
      expect(lines, result.stderr).toHaveLength(1);
      expect(lines[0]).toBe(line);
    }
  }, 60_000);
});
