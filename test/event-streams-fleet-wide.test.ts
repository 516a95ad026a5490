/**
 * FLEET_SSE_MAX_STREAMS_PER_TENANT holds across the API processes of a fleet (contracts §10: a
 * per-tenant limit), not per process: behind a load balancer, a tenant whose event streams land
 * on two API processes still has at most that many open. Each stream holds a lease in Redis
 * (tenant-slot-leases.ts), renewed while it lasts, so the streams of an API process that dies
 * (SIGKILL: nothing given back) count no longer than LEASE_TTL_MS. Before, each process
 * counted its own streams only: N processes let a tenant hold N times the bound.
 */
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import type { RunningApi } from "../src/producer/api-server.js";
import { FleetClient } from "../src/producer/client.js";
import { ApiKeys } from "../src/shared/store/api-keys.js";
import { type ApiProcess, killApi, spawnApi } from "./support/api-process.js";
import { createFleetEnv, type FleetEnv, waitFor } from "./support/fleet-env.js";

const AGENT = { model: { provider: "scripted" as const, steps: [{ text: "ok" }] } };
const MAX = 2;
/** LEASE_TTL_MS: how long a dead process's streams still count (renewed every third of it meanwhile). */
const TTL_MS = 3000;

type Stream = { status: number; response: Response; close: () => void; json?: Record<string, unknown> };

/** An event stream of `sessionId` on `url`, left open (a 200 holds its place until `close`). */
async function open(url: string, key: string, sessionId: string): Promise<Stream> {
  const controller = new AbortController();
  const response = await fetch(`${url}/v1/sessions/${sessionId}/events`, {
    headers: { authorization: `Bearer ${key}`, accept: "text/event-stream" },
    signal: controller.signal,
  });
  const close = () => controller.abort();
  if (response.status === 200) return { status: 200, response, close };
  return {
    status: response.status,
    response,
    close,
    json: (await response.json()) as Record<string, unknown>,
  };
}

describe("event streams per tenant, across API processes", () => {
  let fleet: FleetEnv;
  let inProcess: RunningApi;
  let child: ApiProcess | undefined;
  let dying: ApiProcess | undefined;
  const keys: Record<"acme" | "other" | "crash", { key: string; session: string }> = {} as never;
  const streams: Stream[] = [];

  beforeAll(async () => {
    fleet = await createFleetEnv("ssestreamsfleet", {
      env: { FLEET_SSE_MAX_STREAMS_PER_TENANT: String(MAX), LEASE_TTL_MS: String(TTL_MS) },
    });
    inProcess = (await fleet.startApi()).api;
    const store = new ApiKeys(fleet.database);
    for (const tenant of ["acme", "other", "crash"] as const) {
      const { key } = await store.create(tenant);
      const { id } = await new FleetClient({ baseUrl: inProcess.url, apiKey: key }).createSession({
        agent: AGENT,
      });
      keys[tenant] = { key, session: id };
    }
  }, 120_000);
  afterAll(async () => {
    for (const stream of streams) stream.close();
    killApi(child);
    killApi(dying);
    await fleet?.close();
  });

  /** Opens a stream of `tenant`'s session, closed at the end of the file. */
  const openOf = async (url: string, tenant: keyof typeof keys) => {
    const stream = await open(url, keys[tenant].key, keys[tenant].session);
    streams.push(stream);
    return stream;
  };

  it("streams held on one API process count on another; a stream closed there gives its place back everywhere", async () => {
    child = await spawnApi(fleet);
    const held = [await openOf(inProcess.url, "acme"), await openOf(inProcess.url, "acme")];
    expect(held.map((stream) => stream.status)).toEqual([200, 200]);

    // The other process refuses the tenant's third stream, as the first one would.
    const refused = await openOf(child.url, "acme");
    expect(refused.status).toBe(429);
    expect(Number(refused.response.headers.get("retry-after"))).toBeGreaterThanOrEqual(1);
    expect(refused.json).toEqual({
      error: expect.objectContaining({ code: "too_many_requests", limit: "event_streams" }),
    });
    // Another tenant is not refused there.
    expect((await openOf(child.url, "other")).status).toBe(200);
    // Streams open for longer than their leases' time to live still count: they are renewed.
    await new Promise((resolve) => setTimeout(resolve, 2.5 * TTL_MS));
    expect((await openOf(child.url, "acme")).status).toBe(429);

    // One stream closed on the first process: the other admits one (and only one).
    held[0]!.close();
    await waitFor(
      async () => (await openOf(child!.url, "acme")).status === 200,
      30_000,
      "a stream admitted on the second process once one on the first closed",
    );
    expect((await openOf(child.url, "acme")).status).toBe(429);
    expect((await openOf(inProcess.url, "acme")).status).toBe(429);
  }, 120_000);

  it("the streams of a killed API process come back within LEASE_TTL_MS", async () => {
    const second = await spawnApi(fleet);
    dying = second;
    // A tenant of its own: nothing of the test before counts. Both of its places held on the
    // second API, then refused on the in-process API.
    await waitFor(
      async () =>
        (await openOf(second.url, "crash")).status === 200 &&
        (await openOf(second.url, "crash")).status === 200,
      30_000,
      "both places of the tenant held on the second API",
    );
    expect((await openOf(inProcess.url, "crash")).status).toBe(429);

    // SIGKILL: nothing is given back by the process. The leases lapse.
    const exited = second.exited;
    second.child.kill("SIGKILL");
    await exited;
    let admitted = 0;
    await waitFor(
      async () => {
        if ((await openOf(inProcess.url, "crash")).status === 200) admitted++;
        return admitted === MAX;
      },
      30_000,
      "the killed API's places given back to the tenant",
    );
    expect((await openOf(inProcess.url, "crash")).status).toBe(429);
  }, 120_000);
});
