/**
 * Idempotency-Keys past their 24 h are removed by the sweeper as fast as they expire. It
 * removed at most 10,000 a minute (one prune, once a minute): an API taking keyed requests
 * faster than 167 a second for a day added keys faster than they went, so the table grew
 * without bound. Now a prune that removed a full page is followed by another at the next
 * wide scan, until the expired keys are gone.
 */
import { afterAll, beforeAll, expect, it } from "vitest";
import { loadConfig } from "../src/shared/config.js";
import { type RunningSweeper, startSweeper } from "../src/sweeper/sweeper-process.js";
import { createFleetEnv, type FleetEnv, waitFor } from "./support/fleet-env.js";

let fleet: FleetEnv;
let sweeper: RunningSweeper | undefined;
beforeAll(async () => {
  fleet = await createFleetEnv("idempotency-prune");
});
afterAll(async () => {
  await sweeper?.stop();
  await fleet?.close();
});

it("removes every expired key within seconds, more than one prune's page of them, and keeps fresh ones", async () => {
  const { sql } = fleet.database;
  // 25,000 keys past their 24 h (two and a half prunes' worth), and 100 fresh ones.
  await sql`
    insert into idempotency_keys (tenant, key, request_hash, status_code, response, created_at)
    select 'default', 'old-' || i, 'h', 201, '{}', now() - interval '25 hours'
      from generate_series(1, 25000) as i`;
  await sql`
    insert into idempotency_keys (tenant, key, request_hash, status_code, response)
    select 'default', 'new-' || i, 'h', 201, '{}' from generate_series(1, 100) as i`;
  sweeper = await startSweeper(
    { ...loadConfig({ ...fleet.env, SWEEP_INTERVAL_MS: "50" }), logLevel: "silent" },
    { serveMetrics: false },
  );
  const expired = async () =>
    Number(
      (
        await sql<{ n: string }[]>`
          select count(*)::text as n from idempotency_keys where created_at < now() - interval '24 hours'`
      )[0]!.n,
    );
  // Before, 15,000 were still there after the first prune, for another minute.
  await waitFor(async () => (await expired()) === 0, 15_000, "every expired key removed");
  const [fresh] = await sql<{ n: string }[]>`select count(*)::text as n from idempotency_keys`;
  expect(Number(fresh!.n)).toBe(100);
});
