/**
 * A database a newer release has migrated, met by this (older) release: a host left behind in a
 * rolling upgrade, or a rollback of the code after `fleet migrate` of the new release. Drizzle
 * applies only migrations newer than the newest recorded, so this release's `fleet migrate`
 * applies nothing; before, it printed "migrations applied" all the same (an operator rolling
 * back read that the schema was now this release's), and the roles started saying nothing of
 * it. Now `fleet migrate` says it applied nothing and why, and each role says once, at start,
 * that it runs on a newer release's schema; both go on (exit 0, ready), as a rolling upgrade
 * needs.
 */
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { shippedJournal } from "../src/shared/db/migrate.js";
import { runFleetCli } from "./support/fleet-cli.js";
import { createFleetEnv, type FleetEnv } from "./support/fleet-env.js";

const SHIPPED = shippedJournal();
const NEWER = new RegExp(
  `migrated by a newer release \\(1 migration newer than ${SHIPPED.at(-1)!.tag}, this release's last\\)`,
);

describe("a database migrated by a newer release", () => {
  let fleet: FleetEnv;

  beforeAll(async () => {
    fleet = await createFleetEnv("newermigration");
    // The newer release's migration, generated after this release's newest.
    await fleet.database.sql`
      insert into drizzle.__drizzle_migrations (hash, created_at) values ('a-newer-release', 4102444800000)`;
  }, 60_000);
  afterAll(async () => {
    await fleet?.close();
  });

  it("fleet migrate applies nothing and says so, exit 0", async () => {
    const result = await runFleetCli(["migrate"], fleet.env);
    expect(result.code, result.stderr).toBe(0);
    expect(result.stdout).not.toContain("migrations applied");
    expect(result.stdout).toMatch(NEWER);
    expect(result.stdout).toMatch(/^no migration applied: /);
    const [row] = await fleet.database.sql<{ n: number }[]>`
      select count(*)::int as n from drizzle.__drizzle_migrations`;
    // This release's and the newer one: nothing added, nothing taken away.
    expect(row?.n).toBe(SHIPPED.length + 1);
  }, 120_000);

  it("a worker and a sweeper of this release start, each saying it runs on a newer release's schema", async () => {
    const worker = await fleet.spawnWorker();
    expect(worker.output()).toMatch(new RegExp(`fleet worker: the database was ${NEWER.source}`));
    const sweeper = await fleet.spawnSweeper();
    expect(sweeper.output()).toMatch(new RegExp(`fleet sweeper: the database was ${NEWER.source}`));
  }, 180_000);
});
