/**
 * FLEET_RETENTION_DAYS as an operator may write "keep nearly for ever" (1e8 days): Postgres
 * cannot compute a cutoff that far back (`now() - interval` before 4713 BC is out of range),
 * so every retention pass failed ("retention pass failed; tried again at the next", each
 * minute) — and with it the sweeper's finishing of batch deletions the API left unfinished,
 * which the pass does after the expiry statements: those batches' sessions were never purged.
 * Such a value is now refused at start with one line naming the most it may be; the most it
 * may be runs a pass against real Postgres.
 */
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { loadConfig } from "../src/shared/config.js";
import { DeletionCleanup } from "../src/shared/deletion-cleanup.js";
import { createMetrics } from "../src/shared/metrics.js";
import { DataDeletion } from "../src/shared/store/data-deletion.js";
import { Retention } from "../src/sweeper/retention.js";
import { createFleetEnv, type FleetEnv } from "./support/fleet-env.js";

const BASE = { DATABASE_URL: "postgres://postgres@127.0.0.1:5432/x", REDIS_URL: "redis://127.0.0.1:6379" };

describe("FLEET_RETENTION_DAYS far beyond any history", () => {
  let fleet: FleetEnv;

  beforeAll(async () => {
    fleet = await createFleetEnv("retentiondaysrange");
  }, 60_000);
  afterAll(async () => {
    await fleet?.close();
  });

  it("is refused at start past the most Postgres can compute", () => {
    expect(() => loadConfig({ ...BASE, FLEET_RETENTION_DAYS: "100000000" })).toThrow(
      /FLEET_RETENTION_DAYS: .*at most 1000000/,
    );
  });

  it("at its most, a pass runs and finishes a batch deletion left unfinished", async () => {
    const config = loadConfig({ ...fleet.env, FLEET_RETENTION_DAYS: "1000000" });
    const { sql } = fleet.database;
    await sql`insert into batches (id, tenant, deleted_at) values ('b-left', 'default', now() - interval '1 hour')`;
    const store = new DataDeletion(fleet.database);
    const cleanup = new DeletionCleanup({
      redis: fleet.redis,
      prefix: fleet.config.prefix,
      removeJob: async () => {},
      metrics: createMetrics("retention-days-range"),
      eventsEnabled: true,
    });
    const retention = new Retention({ store, cleanup, settings: config.retention, log: console });
    expect(await retention.pass()).toEqual({ sessionsDeleted: 0, batchesDeleted: 1, moreLeft: false });
    expect(await sql`select 1 from batches where id = 'b-left'`).toHaveLength(0);
  });
});
