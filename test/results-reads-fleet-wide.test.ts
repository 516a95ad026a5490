/**
 * FLEET_RESULTS_MAX_READS_PER_TENANT holds across the API processes of a fleet (contracts §10:
 * a per-tenant limit), not per process: behind a load balancer, a tenant whose reads land on
 * two API processes still has at most that many open. Each read holds a lease in Redis
 * (tenant-slot-leases.ts), renewed while it lasts, so the reads of an API process that dies
 * (SIGKILL: nothing given back) count no longer than LEASE_TTL_MS. Before, each process
 * counted its own reads only: N processes let a tenant hold N times the bound.
 */
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import type { RunningApi } from "../src/producer/api-server.js";
import { FleetClient } from "../src/producer/client.js";
import { ApiKeys } from "../src/shared/store/api-keys.js";
import { type ApiProcess, killApi, spawnApi } from "./support/api-process.js";
import { createFleetEnv, type FleetEnv, waitFor } from "./support/fleet-env.js";

const AGENT = { model: { provider: "scripted" as const, steps: [{ text: "ok" }] } };
/** 12 answers of 1.3 MB (15.6 MB): more than the loopback sockets hold, so a read that takes nothing stays open. */
const SESSIONS = Array.from({ length: 12 }, (_, i) => ({
  agent: AGENT,
  customId: `big-${i}`,
  messages: [
    { role: "user" as const, content: "write a lot" },
    {
      role: "assistant" as const,
      content: String.fromCharCode(97 + i).repeat(1_300_000),
      stopReason: "end_turn",
    },
  ],
}));
const MAX = 2;
/** LEASE_TTL_MS: how long a dead process's reads still count (renewed every third of it meanwhile). */
const TTL_MS = 3000;

type Reader = { status: number; response: Response; json?: Record<string, unknown> };

/** A results read that reads nothing of its answer yet (a 200 holds its place). */
async function open(url: string, key: string, batchId: string): Promise<Reader> {
  const response = await fetch(`${url}/v1/batches/${batchId}/results`, {
    headers: { authorization: `Bearer ${key}` },
  });
  if (response.status === 200) return { status: 200, response };
  return { status: response.status, response, json: (await response.json()) as Record<string, unknown> };
}

/** Every line of a read still open, read to its end. */
async function readAll(reader: Reader): Promise<number> {
  const text = await reader.response.text();
  return text.split("\n").filter((line) => line.trim()).length;
}

describe("results reads per tenant, across API processes", () => {
  let fleet: FleetEnv;
  let inProcess: RunningApi;
  let child: ApiProcess | undefined;
  let dying: ApiProcess | undefined;
  let acme: { key: string };
  let other: { key: string };
  let crash: { key: string };
  let batchId: string;
  let otherBatchId: string;
  let crashBatchId: string;

  beforeAll(async () => {
    fleet = await createFleetEnv("resultsreadsfleet", {
      env: { FLEET_RESULTS_MAX_READS_PER_TENANT: String(MAX), LEASE_TTL_MS: String(TTL_MS) },
    });
    inProcess = (await fleet.startApi()).api;
    const keys = new ApiKeys(fleet.database);
    acme = await keys.create("acme");
    other = await keys.create("other");
    crash = await keys.create("crash");
    batchId = (await new FleetClient({ baseUrl: inProcess.url, apiKey: acme.key }).createBatch(SESSIONS)).id;
    otherBatchId = (
      await new FleetClient({ baseUrl: inProcess.url, apiKey: other.key }).createBatch(SESSIONS.slice(0, 2))
    ).id;
    crashBatchId = (
      await new FleetClient({ baseUrl: inProcess.url, apiKey: crash.key }).createBatch(SESSIONS)
    ).id;
  }, 120_000);
  afterAll(async () => {
    killApi(child);
    killApi(dying);
    await fleet?.close();
  });

  it("reads held on one API process count on another; a read ended there gives its place back everywhere", async () => {
    child = await spawnApi(fleet);
    const held = [await open(inProcess.url, acme.key, batchId), await open(inProcess.url, acme.key, batchId)];
    expect(held.map((reader) => reader.status)).toEqual([200, 200]);

    // The other process refuses the tenant's third read, as the first one would.
    const refused = await open(child.url, acme.key, batchId);
    expect(refused.status).toBe(429);
    expect(Number(refused.response.headers.get("retry-after"))).toBeGreaterThanOrEqual(1);
    expect(refused.json).toEqual({
      error: expect.objectContaining({ code: "too_many_requests", limit: "results_reads" }),
    });
    // Another tenant is not refused there.
    const theirs = await open(child.url, other.key, otherBatchId);
    expect(theirs.status).toBe(200);
    expect(await readAll(theirs)).toBe(2);
    // Reads open for longer than their leases' time to live still count: they are renewed.
    await new Promise((resolve) => setTimeout(resolve, 2.5 * TTL_MS));
    expect((await open(child.url, acme.key, batchId)).status).toBe(429);

    // One read ended on the first process: the other admits one (and only one).
    await held[0]!.response.body!.cancel();
    let admitted: Reader | undefined;
    await waitFor(
      async () => {
        const reader = await open(child!.url, acme.key, batchId);
        if (reader.status === 200) admitted = reader;
        return reader.status === 200;
      },
      30_000,
      "a read admitted on the second process once one on the first ended",
    );
    expect((await open(child.url, acme.key, batchId)).status).toBe(429);
    expect((await open(inProcess.url, acme.key, batchId)).status).toBe(429);
    expect(await readAll(admitted!)).toBe(SESSIONS.length);
    expect(await readAll(held[1]!)).toBe(SESSIONS.length);
  }, 120_000);

  it("the reads of a killed API process come back within LEASE_TTL_MS", async () => {
    const second = await spawnApi(fleet);
    dying = second;
    // A tenant of its own: nothing of the test before counts.
    // Both of the tenant's places held on the second API, then refused on the in-process API.
    let held: Reader[] = [];
    await waitFor(
      async () => {
        const reader = await open(second.url, crash.key, crashBatchId);
        if (reader.status === 200) held.push(reader);
        return held.length === MAX;
      },
      30_000,
      "both places of the tenant held on the second API",
    );
    expect((await open(inProcess.url, crash.key, crashBatchId)).status).toBe(429);

    // SIGKILL: nothing is given back by the process. The leases lapse.
    const exited = second.exited;
    second.child.kill("SIGKILL");
    await exited;
    for (const reader of held) await reader.response.body?.cancel().catch(() => undefined);
    held = [];
    const admitted: Reader[] = [];
    await waitFor(
      async () => {
        const reader = await open(inProcess.url, crash.key, crashBatchId);
        if (reader.status === 200) admitted.push(reader);
        return admitted.length === MAX;
      },
      30_000,
      "the killed API's places given back to the tenant",
    );
    expect((await open(inProcess.url, crash.key, crashBatchId)).status).toBe(429);
    expect(await Promise.all(admitted.map(readAll))).toEqual([SESSIONS.length, SESSIONS.length]);
  }, 120_000);
});
