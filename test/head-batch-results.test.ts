/**
 * `HEAD /v1/batches/:id/results` (`curl -I`, an uptime monitor, a link checker): Fastify
 * answers HEAD of every GET route with that route, and hands the body it gets, a stream, to
 * `resume()`: every page of the batch's results was read from Postgres and thrown away, for
 * nothing. A HEAD is answered at once now, as the GET would begin (200 `application/x-ndjson`,
 * or its 4xx), reading no result and holding none of its tenant's
 * FLEET_RESULTS_MAX_READS_PER_TENANT places.
 */
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { ApiKeys } from "../src/shared/store/api-keys.js";
import { type CountingProxy, startCountingProxy } from "./support/counting-proxy.js";
import { createFleetEnv, type FleetEnv } from "./support/fleet-env.js";
import { keyedCall } from "./support/keyed-call.js";

const AGENT = { model: { provider: "scripted" as const, steps: [{ text: "ok" }] } };
const MISSING = "00000000-0000-4000-8000-000000000000";
/** 8 sessions with an answer of 1 MB each: 8 MB of results, read by a GET (and by a HEAD that reads them). */
const SESSIONS = Array.from({ length: 8 }, (_, i) => ({
  agent: AGENT,
  customId: `big-${i}`,
  messages: [
    { role: "user" as const, content: "write a lot" },
    {
      role: "assistant" as const,
      content: String.fromCharCode(97 + i).repeat(1_000_000),
      stopReason: "end_turn",
    },
  ],
}));

describe("HEAD of a batch's results", () => {
  let proxy: CountingProxy;
  let fleet: FleetEnv;
  let base: string;
  let acme: string;
  let globex: string;
  let batch: string;

  const call = keyedCall(() => base, 10_000);

  beforeAll(async () => {
    proxy = await startCountingProxy();
    // One read a tenant: a HEAD that kept its place shuts the tenant's next reader out.
    fleet = await createFleetEnv("head-batch-results", {
      viaDatabase: (url) => proxy.urlFor(url),
      env: { FLEET_RESULTS_MAX_READS_PER_TENANT: "1" },
    });
    const keys = new ApiKeys(fleet.database);
    acme = (await keys.create("acme")).key;
    globex = (await keys.create("globex")).key;
    base = (await fleet.startApi()).api.url;
    const created = await call("POST", "/v1/batches", acme, { sessions: SESSIONS });
    expect(created.status).toBe(201);
    batch = ((await created.json()) as { id: string }).id;
  }, 60_000);
  afterAll(async () => {
    await fleet?.close();
    await proxy?.close();
  });

  it("is answered at once with the results' head, reads no result, and holds no place of its tenant", async () => {
    const path = `/v1/batches/${batch}/results`;
    const before = proxy.received();
    const head = await call("HEAD", path, acme);
    expect(head.status).toBe(200);
    expect(head.headers.get("content-type")).toBe("application/x-ndjson; charset=utf-8");
    expect(head.headers.get("cache-control")).toContain("no-store");
    // Given the time to read the 8 MB a GET reads, it read none of it.
    await new Promise((resolve) => setTimeout(resolve, 1_500));
    expect(proxy.received() - before).toBeLessThan(500_000);

    // The tenant's one place is free: its reader gets every result, and a HEAD meanwhile
    // (holding nothing) is answered too.
    const reader = await call("GET", path, acme);
    expect(reader.status).toBe(200);
    expect((await call("HEAD", path, acme)).status).toBe(200);
    const lines = (await reader.text()).split("\n").filter((line) => line.trim());
    expect(lines).toHaveLength(SESSIONS.length);
    // What the GET read came through the proxy: the counter sees results read.
    expect(proxy.received() - before).toBeGreaterThan(SESSIONS.length * 1_000_000);
  }, 60_000);

  it("another tenant's, or a missing, batch is a 404 as for GET; a bad `after` a 400", async () => {
    expect((await call("HEAD", `/v1/batches/${batch}/results`, globex)).status).toBe(404);
    expect((await call("HEAD", `/v1/batches/${MISSING}/results`, acme)).status).toBe(404);
    expect((await call("HEAD", `/v1/batches/${batch}/results?limit=3`, acme)).status).toBe(400);
  }, 30_000);
});
