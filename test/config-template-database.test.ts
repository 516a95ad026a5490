/**
 * A DATABASE_URL naming one of Postgres's template databases. `fleet migrate` applied the
 * fleet's schema to `template1` (found by hand: `DATABASE_URL=…/template1 npx fleet migrate`
 * said "migrations applied"), and every database created on that server afterwards (CREATE
 * DATABASE copies template1) began as a copy of the fleet's tables: one that should have been
 * empty, e.g. for the check that says "not migrated", was not. Refused when the environment
 * is read, before any connection: no process of the fleet touches a template.
 */
import { describe, expect, it } from "vitest";
import { loadConfig } from "../src/shared/config.js";

describe("DATABASE_URL naming a template database", () => {
  it("is refused naming DATABASE_URL, for template1 and template0; other names are taken", () => {
    for (const name of ["template1", "template0"])
      expect(() => loadConfig({ DATABASE_URL: `postgres://postgres@127.0.0.1:5432/${name}` })).toThrow(
        expect.objectContaining({
          field: "DATABASE_URL",
          message: `DATABASE_URL: "${name}" is a template Postgres copies into every new database: give the fleet a database of its own, e.g. postgres://postgres@127.0.0.1:5432/agent_fleet`,
        }),
      );
    for (const name of ["agent_fleet", "template1_fleet", "postgres"])
      expect(
        loadConfig({ DATABASE_URL: `postgres://postgres@127.0.0.1:5432/${name}` }).databaseUrl,
      ).toContain(name);
  });
});
