/**
 * The failed-authentication limit per client address (auth-failures.ts) holds for requests
 * sent at once, not only one after another: each request with a key was checked against its
 * address's count before any look-up had failed, so 60 made-up keys sent together were all
 * looked up in Postgres (60 401s) against a burst of 5 — a guesser that sends its guesses in
 * parallel waves got as many look-ups as it could send. A look-up in flight now holds its
 * place in the count until it is answered; requests sent at once with one key share one
 * look-up, so a tenant's client that opens many requests at once with its (valid) key on a
 * freshly started API is served, not refused.
 */
import { afterAll, beforeAll, expect, it } from "vitest";
import { ApiAuth } from "../src/producer/auth.js";
import { hashKey } from "../src/shared/store/api-keys.js";
import { createFleetEnv, type FleetEnv } from "./support/fleet-env.js";

const KEY = "test-key-for-concurrent-auth-failures-0123456789";
const BURST = 5;
const AT_ONCE = 60;

let fleet: FleetEnv;
let base: string;

beforeAll(async () => {
  fleet = await createFleetEnv("authconcurrent", {
    env: {
      FLEET_BOOTSTRAP_KEY: KEY,
      // One failure back every 10 minutes: nothing refills while the test runs.
      FLEET_API_AUTH_FAILURES_PER_MINUTE: "0.1",
      FLEET_API_AUTH_FAILURE_BURST: String(BURST),
    },
  });
  base = (await fleet.startApi()).api.url;
}, 60_000);
afterAll(() => fleet?.close());

const statusOf = async (key: string): Promise<number> => {
  const response = await fetch(`${base}/v1/sessions?limit=1`, {
    headers: { authorization: `Bearer ${key}` },
  });
  await response.arrayBuffer();
  return response.status;
};

it("a tenant's many requests at once with its valid key, first seen by this API, are all served", async () => {
  const statuses = await Promise.all(Array.from({ length: AT_ONCE }, () => statusOf(KEY)));
  expect(statuses.filter((s) => s !== 200)).toEqual([]);
});

it("made-up keys sent at once are looked up no more than the burst allows; the rest get 429", async () => {
  const statuses = await Promise.all(
    Array.from({ length: AT_ONCE }, (_, i) => statusOf(`guess-at-once-${i}`)),
  );
  const counts = { 401: 0, 429: 0 };
  for (const s of statuses) counts[s as 401 | 429] += 1;
  console.log(`${AT_ONCE} made-up keys at once from one address (burst ${BURST}):`, counts);
  expect(counts[401]).toBeLessThanOrEqual(BURST);
  expect(counts[401] + counts[429]).toBe(AT_ONCE);
  // The tenant's key, valid lately, is still served from the same address.
  expect(await statusOf(KEY)).toBe(200);
});

it("ApiAuth looks a key up once for requests that ask at once", async () => {
  const lookups: string[] = [];
  let answer: (found: { id: string; tenant: string; admin: boolean } | undefined) => void = () => {};
  const auth = new ApiAuth({
    keys: {
      anyExists: async () => true,
      tenantOf: (hash) => {
        lookups.push(hash);
        return new Promise((resolve) => {
          answer = resolve;
        });
      },
    },
    loopback: true,
  });
  const asked = Array.from({ length: 10 }, () => auth.authenticate("Bearer good"));
  await new Promise((resolve) => setImmediate(resolve));
  expect(lookups).toEqual([hashKey("good")]);
  answer({ id: "k1", tenant: "acme", admin: false });
  expect(await Promise.all(asked)).toEqual(Array(10).fill("acme"));
});
