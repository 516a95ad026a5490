/**
 * A FLEET_BOOTSTRAP_KEY the API does not take (README "Tenants and API keys": it is stored only
 * while no key exists). An operator who rotates the first key by changing the variable, or who
 * revoked it and left it set, got an API that started as usual and answered the key `401` on
 * every request, with nothing saying why. Now the API says so at start, naming the variable.
 */
import { afterAll, beforeAll, expect, it } from "vitest";
import { storeBootstrapKey } from "../src/producer/auth.js";
import { ApiKeys, hashKey } from "../src/shared/store/api-keys.js";
import { spawnApi } from "./support/api-process.js";
import { createFleetEnv, type FleetEnv } from "./support/fleet-env.js";

const FIRST = `boot-${"a".repeat(40)}`;
const SECOND = `boot-${"b".repeat(40)}`;

let fleet: FleetEnv;
beforeAll(async () => {
  fleet = await createFleetEnv("bootstrapunused");
}, 60_000);
afterAll(() => fleet?.close());

async function startOutput(key: string): Promise<{ output: string; status: number }> {
  const api = await spawnApi(fleet, { FLEET_BOOTSTRAP_KEY: key });
  const { status } = await fetch(`${api.url}/v1/sessions`, { headers: { authorization: `Bearer ${key}` } });
  api.signal();
  await api.exited;
  return { output: api.output(), status };
}

it("says at start that FLEET_BOOTSTRAP_KEY is not a valid key once another exists, or once it is revoked", async () => {
  // Stored on an empty database: taken, nothing to say.
  const stored = await startOutput(FIRST);
  expect(stored.status).toBe(200);
  expect(stored.output).not.toContain("FLEET_BOOTSTRAP_KEY");
  // Changed while a key exists: not stored, and refused.
  const changed = await startOutput(SECOND);
  expect(changed.status).toBe(401);
  expect(changed.output).toContain("FLEET_BOOTSTRAP_KEY is set but is not a valid key");
  // The first one revoked and left set.
  const keys = new ApiKeys(fleet.database);
  const [boot] = (await keys.list()).filter((k) => k.id.startsWith("boot"));
  await keys.revoke(boot!.id);
  const revoked = await startOutput(FIRST);
  expect(revoked.status).toBe(401);
  expect(revoked.output).toContain("FLEET_BOOTSTRAP_KEY is set but is not a valid key");
}, 120_000);

it("a FLEET_BOOTSTRAP_KEY too short to store, once a key exists, is warned about, not a stop at start", async () => {
  // As one with a space (api-keys.ts `bootstrap`): once any key exists it is not stored, so a
  // deployment whose variable was never taken still starts and is told why the key is refused.
  // Before, `must be at least 32 characters long` stopped the API (exit 2) though no key
  // would have been stored.
  const keys = new ApiKeys(fleet.database);
  expect(await keys.anyExists()).toBe(true);
  await expect(storeBootstrapKey(keys, "changeme")).resolves.toContain(
    "FLEET_BOOTSTRAP_KEY is set but is not a valid key",
  );
  await expect(storeBootstrapKey(keys, "change me, not a key at all but long enough")).resolves.toContain(
    "FLEET_BOOTSTRAP_KEY is set but is not a valid key",
  );
  // Longer than any key a request may carry (MAX_KEY_LENGTH): refused on every request, also
  // when a release before stored it (it stored any length), which then said nothing at start.
  const long = `long-${"k".repeat(300)}`;
  await expect(storeBootstrapKey(keys, long)).resolves.toContain(
    "FLEET_BOOTSTRAP_KEY is set but is not a valid key",
  );
  await fleet.database.sql`
    insert into api_keys (id, tenant, hash, prefix, admin)
    values ('bootlong', 'default', ${hashKey(long)}, 'sha256:…', true)`;
  await expect(storeBootstrapKey(keys, long)).resolves.toContain(
    "FLEET_BOOTSTRAP_KEY is set but is not a valid key",
  );
});
