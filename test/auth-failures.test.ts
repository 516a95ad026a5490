/**
 * Failed authentications are limited per client address (auth-failures.ts): through the real
 * API on a real Postgres, a client that sends made-up keys gets 401s up to its burst, then
 * 429 with Retry-After in the error shape before any key look-up; a tenant with a valid key
 * at the same address is still served; X-Forwarded-For is ignored unless
 * FLEET_API_TRUST_PROXY says whose to trust. The limiter's memory is bounded (a fake clock,
 * no timing), and ApiAuth answers a repeated unknown key without a second look-up.
 */
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { type RunningApi, startApi } from "../src/producer/api-server.js";
import { ApiAuth } from "../src/producer/auth.js";
import { AuthFailureLimiter, clientKey } from "../src/producer/auth-failures.js";
import { hashKey } from "../src/shared/store/api-keys.js";
import { type Answer, readAnswer } from "./support/answer.js";
import { createFleetEnv, type FleetEnv } from "./support/fleet-env.js";

const KEY = "test-key-for-auth-failures-0123456789abcdef";
const BURST = 5;

/** A sample's value in a /metrics text: the series of `name` whose labels include `labels`. */
function sample(text: string, name: string, labels = ""): number | undefined {
  const line = text
    .split("\n")
    .find((l) => l.startsWith(`${name}{`) && l.includes(labels) && !l.startsWith("#"));
  return line === undefined ? undefined : Number(line.slice(line.lastIndexOf(" ") + 1));
}

describe("failed authentications per client address, through the API", () => {
  let fleet: FleetEnv;
  let base: string;
  let proxied: RunningApi;

  beforeAll(async () => {
    fleet = await createFleetEnv("authfailures", {
      env: {
        FLEET_BOOTSTRAP_KEY: KEY,
        // One failure back every 10 minutes: nothing refills while the test runs.
        FLEET_API_AUTH_FAILURES_PER_MINUTE: "0.1",
        FLEET_API_AUTH_FAILURE_BURST: String(BURST),
      },
    });
    base = (await fleet.startApi()).api.url;
    proxied = await startApi({ ...fleet.config, logLevel: "silent", apiTrustProxy: true }, { port: 0 });
  }, 60_000);
  afterAll(async () => {
    await proxied?.stop();
    await fleet?.close();
  });

  const get = async (
    url: string,
    headers: Record<string, string> = {},
  ): Promise<Answer & { retry: string | null }> => {
    const response = await fetch(`${url}/v1/sessions?limit=1`, { headers });
    return { ...(await readAnswer(response)), retry: response.headers.get("retry-after") };
  };

  it("answers 401 up to the burst, then 429 with Retry-After; a valid key is still served", async () => {
    // The tenant has used its key from this address already.
    expect((await get(base, { authorization: `Bearer ${KEY}` })).status).toBe(200);
    const statuses: number[] = [];
    for (let i = 0; i < BURST + 10; i++) {
      // A new made-up key each time (a guesser's), from 127.0.0.1, claiming other addresses.
      const answer = await get(base, {
        authorization: `Bearer guess-${i}`,
        "x-forwarded-for": `203.0.113.${i}`,
      });
      statuses.push(answer.status);
      if (answer.status === 429) {
        expect(answer.json).toEqual({
          error: {
            code: "too_many_requests",
            message: expect.stringContaining("FLEET_API_AUTH_FAILURES_PER_MINUTE"),
            limit: "auth_failures",
            retryAfter: expect.any(Number),
          },
        });
        expect(Number(answer.retry)).toBe(answer.json.error.retryAfter);
        expect(Number(answer.retry)).toBeGreaterThanOrEqual(1);
        expect(answer.text).not.toMatch(/at .*\.js|stack/i);
      }
    }
    console.log("statuses of 15 made-up keys from one address (burst 5):", statuses.join(" "));
    expect(statuses).toEqual([...Array(BURST).fill(401), ...Array(10).fill(429)]);
    // Without a key (no look-up to spend) it is the usual 401.
    expect((await get(base)).status).toBe(401);
    // The tenant's key at the same address, valid lately: looked up and served.
    const served = await get(base, { authorization: `Bearer ${KEY}` });
    expect(served.status, served.text).toBe(200);
    // Health and metrics need no key and are never limited.
    expect((await fetch(`${base}/healthz`)).status).toBe(200);
    const metrics = await fetch(`${base}/metrics`);
    expect(metrics.status).toBe(200);
    // What an operator sees: the refused keys (not the request without one) and the 429s.
    const text = await metrics.text();
    expect(sample(text, "fleet_auth_failures_total")).toBe(BURST);
    expect(sample(text, "fleet_requests_limited_total", 'limit="auth_failures"')).toBe(10);
    expect(sample(text, "fleet_requests_limited_total", 'limit="request_rate"')).toBe(0);
  });

  it("with FLEET_API_TRUST_PROXY, each client behind the proxy has its own count", async () => {
    for (let i = 0; i < BURST; i++) {
      const answer = await get(proxied.url, {
        authorization: `Bearer bad-${i}`,
        "x-forwarded-for": "198.51.100.7",
      });
      expect(answer.status).toBe(401);
    }
    const limited = await get(proxied.url, {
      authorization: "Bearer bad-x",
      "x-forwarded-for": "198.51.100.7",
    });
    expect(limited.status).toBe(429);
    // Another client behind the trusted proxy (same connection address) has its own count.
    const other = await get(proxied.url, {
      authorization: "Bearer bad-y",
      "x-forwarded-for": "198.51.100.8",
    });
    expect(other.status).toBe(401);
    // A key this process never saw valid is not looked up from a limited address.
    const unseen = await get(proxied.url, {
      authorization: `Bearer ${KEY}`,
      "x-forwarded-for": "198.51.100.7",
    });
    expect(unseen.status).toBe(429);
  });
});

describe("the limiter's memory and ApiAuth's look-ups (no network)", () => {
  it("keys IPv6 clients by /64 and IPv4-mapped addresses as IPv4", () => {
    expect(clientKey("2001:db8:1:2:3:4:5:6")).toBe("2001:db8:1:2::/64");
    expect(clientKey("2001:db8:1:2::9")).toBe("2001:db8:1:2::/64");
    expect(clientKey("2001:db8::1")).toBe("2001:db8:0:0::/64");
    expect(clientKey("::ffff:192.0.2.1")).toBe("192.0.2.1");
    expect(clientKey("192.0.2.1")).toBe("192.0.2.1");
  });

  it("refills at the configured rate, tracks at most maxClients addresses, and makes new ones share a bucket when full", () => {
    let now = 0;
    const limiter = new AuthFailureLimiter({ perMinute: 60, burst: 2 }, { now: () => now, maxClients: 3 });
    limiter.failed("10.0.0.1");
    expect(limiter.retryAfter("10.0.0.1")).toBe(0);
    limiter.failed("10.0.0.1");
    expect(limiter.retryAfter("10.0.0.1")).toBe(1);
    now += 1_000;
    expect(limiter.retryAfter("10.0.0.1")).toBe(0);
    // Three more addresses fail twice each: the map holds 3, the fourth counts in the shared bucket.
    for (const ip of ["10.0.0.2", "10.0.0.3", "10.0.0.4", "10.0.0.5"]) {
      limiter.failed(ip);
      limiter.failed(ip);
    }
    console.log("addresses tracked with maxClients 3:", limiter.size);
    expect(limiter.size).toBeLessThanOrEqual(4);
    // Every slot still short of tokens: a never-seen address shares the exhausted bucket.
    expect(limiter.retryAfter("10.0.0.99")).toBe(1);
    // Once the buckets refill they are forgotten and new addresses get their own again.
    now += 60_000;
    limiter.failed("10.0.0.6");
    expect(limiter.retryAfter("10.0.0.6")).toBe(0);
    expect(limiter.size).toBeLessThanOrEqual(4);
  });

  it("answers a repeated unknown key without a second look-up, and recognises a key found valid", async () => {
    let now = 0;
    const lookups: string[] = [];
    const auth = new ApiAuth({
      keys: {
        anyExists: async () => true,
        tenantOf: async (hash) => {
          lookups.push(hash);
          return hash === hashKey("good") ? { id: "k1", tenant: "acme", admin: false } : undefined;
        },
      },
      loopback: true,
      cacheMs: 5_000,
      now: () => now,
    });
    for (let i = 0; i < 3; i++) await expect(auth.authenticate("Bearer bad")).rejects.toThrow(/not valid/);
    expect(lookups).toHaveLength(1);
    now += 5_000;
    await expect(auth.authenticate("Bearer bad")).rejects.toThrow(/not valid/);
    expect(lookups).toHaveLength(2);
    expect(auth.recognises("Bearer good")).toBe(false);
    expect(await auth.authenticate("Bearer good")).toBe("acme");
    expect(auth.recognises("Bearer good")).toBe(true);
    expect(auth.recognises("Bearer bad")).toBe(false);
  });
});
