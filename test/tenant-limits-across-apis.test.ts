/**
 * The per-tenant limits that were shared by every API process already (the inventory of
 * test/results-reads-fleet-wide.test.ts's commit): FLEET_TENANT_MAX_ACTIVE_SESSIONS is counted
 * in Postgres under a per-tenant advisory lock, FLEET_TENANT_REQUESTS_PER_SECOND on one Redis
 * key per tenant. Two API servers, each with its own Postgres pool and Redis connection, on one
 * fleet: what a tenant did on one counts on the other.
 */
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { ApiKeys } from "../src/shared/store/api-keys.js";
import { createFleetEnv } from "./support/fleet-env.js";

const AGENT = { model: { provider: "scripted" as const, steps: [{ text: "ok" }] } };

async function call(base: string, method: string, path: string, key: string, body?: unknown) {
  const response = await fetch(`${base}${path}`, {
    method,
    headers: { authorization: `Bearer ${key}`, ...(body ? { "content-type": "application/json" } : {}) },
    body: body ? JSON.stringify(body) : undefined,
  });
  const text = await response.text();
  return { status: response.status, text, json: text ? JSON.parse(text) : undefined };
}

async function twoApis(name: string, env: Record<string, string>) {
  const fleet = await createFleetEnv(name, { env });
  const keys = new ApiKeys(fleet.database);
  const a = (await keys.create("a")).key;
  const b = (await keys.create("b")).key;
  const first = (await fleet.startApi()).api.url;
  const second = (await fleet.startApi()).api.url;
  return { fleet, a, b, first, second };
}

describe("active sessions per tenant, across API processes", () => {
  let setup: Awaited<ReturnType<typeof twoApis>>;
  beforeAll(async () => {
    setup = await twoApis("activeacross", { FLEET_TENANT_MAX_ACTIVE_SESSIONS: "2" });
  }, 60_000);
  afterAll(() => setup?.fleet.close());

  it("sessions made active through one API count on the other", async () => {
    const { a, b, first, second } = setup;
    const batch = (base: string, key: string) =>
      call(base, "POST", "/v1/batches", key, { sessions: [{ agent: AGENT, input: "go" }] });
    // No worker runs: every queued run keeps its session active.
    expect((await batch(first, a)).status).toBe(201);
    expect((await batch(second, a)).status).toBe(201);
    const over = await batch(second, a);
    expect(over.status, over.text).toBe(429);
    expect(over.json.error).toMatchObject({ code: "too_many_requests", limit: "active_sessions" });
    expect((await batch(first, a)).status).toBe(429);
    expect((await batch(second, b)).status).toBe(201);
  });
});

describe("request rate per tenant, across API processes", () => {
  let setup: Awaited<ReturnType<typeof twoApis>>;
  beforeAll(async () => {
    // A burst of 4, then one request every 20 s: nothing refills while the test runs.
    setup = await twoApis("rateacross", {
      FLEET_TENANT_REQUESTS_PER_SECOND: "0.05",
      FLEET_TENANT_REQUEST_BURST: "4",
    });
  }, 60_000);
  afterAll(() => setup?.fleet.close());

  it("requests made through one API count on the other", async () => {
    const { a, b, first, second } = setup;
    const statuses = [];
    for (const base of [first, second, first, second])
      statuses.push((await call(base, "GET", "/v1/sessions", a)).status);
    expect(statuses).toEqual([200, 200, 200, 200]);
    const over = await call(second, "GET", "/v1/sessions", a);
    expect(over.status, over.text).toBe(429);
    expect(over.json.error).toMatchObject({ code: "too_many_requests", limit: "request_rate" });
    expect((await call(first, "GET", "/v1/sessions", a)).status).toBe(429);
    expect((await call(second, "GET", "/v1/sessions", b)).status).toBe(200);
  });
});
