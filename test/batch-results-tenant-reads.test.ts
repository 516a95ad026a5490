/**
 * `GET /v1/batches/:id/results` open at once per tenant on one API process are bounded by
 * FLEET_RESULTS_MAX_READS_PER_TENANT (contracts §10): one more answers `429` with `Retry-After`
 * and `limit: "results_reads"`, and another tenant's reads are not refused. Before, nothing
 * bounded them (FLEET_SSE_MAX_STREAMS_PER_TENANT counts only event streams): each read holds a
 * page of results (up to 8 MiB) in the API for as long as its reader reads, however slowly,
 * and one tenant could open any number. A read's place is given back however it ends: read to
 * the end, its client gone, its reader cut for taking nothing (FLEET_SSE_STALL_MS), its key
 * revoked. `FleetClient.batchResults()` and `fleet batch results` wait out the 429 (a place
 * freed meanwhile: every line) or say it.
 */
import { Writable } from "node:stream";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { batchResultsCommand } from "../src/commands/batch.js";
import { FleetApiError, FleetClient } from "../src/producer/client.js";
import { ApiKeys } from "../src/shared/store/api-keys.js";
import { createFleetEnv, waitFor } from "./support/fleet-env.js";

const AGENT = { model: { provider: "scripted" as const, steps: [{ text: "ok" }] } };
/** 12 sessions with an answer of 1.3 MB each (15.6 MB, under the 16 MiB body limit): well over what the loopback sockets can hold (send 4 MB, receive autotuned to 6 MB), so a read that takes nothing cannot end by itself. */
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

async function fleetOf(name: string, env: Record<string, string>) {
  const fleet = await createFleetEnv(name, {
    env: { FLEET_RESULTS_MAX_READS_PER_TENANT: String(MAX), ...env },
  });
  const { api } = await fleet.startApi();
  const keys = new ApiKeys(fleet.database);
  const acme = await keys.create("acme");
  const other = await keys.create("other");
  const clientOf = (key: string, maxLimitWaitMs?: number) =>
    new FleetClient({
      baseUrl: api.url,
      apiKey: key,
      ...(maxLimitWaitMs === undefined ? {} : { maxLimitWaitMs }),
    });
  return { fleet, url: api.url, keys, acme, other, clientOf };
}

describe("results reads per tenant", () => {
  let setup: Awaited<ReturnType<typeof fleetOf>>;
  beforeAll(async () => {
    setup = await fleetOf("resultsreads", {});
  }, 60_000);
  afterAll(() => setup?.fleet.close());

  it("one more than FLEET_RESULTS_MAX_READS_PER_TENANT answers 429; another tenant reads; finished and gone readers give their place back", async () => {
    const { url, acme, other, clientOf } = setup;
    const batch = await clientOf(acme.key).createBatch(SESSIONS);
    const theirs = await clientOf(other.key).createBatch(SESSIONS.slice(0, 2));
    const held = [await open(url, acme.key, batch.id), await open(url, acme.key, batch.id)];
    expect(held.map((reader) => reader.status)).toEqual([200, 200]);

    const refused = await open(url, acme.key, batch.id);
    expect(refused.status).toBe(429);
    expect(Number(refused.response.headers.get("retry-after"))).toBeGreaterThanOrEqual(1);
    expect(refused.json).toEqual({
      error: expect.objectContaining({ code: "too_many_requests", limit: "results_reads" }),
    });
    // The client that will not wait says the limit; the other tenant is not refused.
    const impatient = clientOf(acme.key, 0);
    const said = await (async () => {
      for await (const _ of impatient.batchResults(batch.id));
    })().catch((error: unknown) => error);
    expect(said).toBeInstanceOf(FleetApiError);
    expect(said).toMatchObject({ status: 429, limit: "results_reads" });
    const otherReads = [await open(url, other.key, theirs.id), await open(url, other.key, theirs.id)];
    expect(otherReads.map((reader) => reader.status)).toEqual([200, 200]);
    expect(await Promise.all(otherReads.map(readAll))).toEqual([2, 2]);

    // A client gone gives its place back: `fleet batch results`, refused meanwhile, waits out
    // the 429 and prints every line.
    let out = "";
    let err = "";
    const sink = (add: (text: string) => void) =>
      new Writable({
        write(chunk, _encoding, done) {
          add(String(chunk));
          done();
        },
      });
    const command = batchResultsCommand(batch.id, {
      api: url,
      apiKey: acme.key,
      io: { stdout: sink((text) => (out += text)), stderr: sink((text) => (err += text)), isTTY: false },
    });
    await new Promise((resolve) => setTimeout(resolve, 500));
    await held[0]!.response.body!.cancel();
    expect(await command, err).toBe(0);
    expect(out.split("\n").filter((line) => line.trim())).toHaveLength(SESSIONS.length);

    // A read to its end gives its place back.
    expect(await readAll(held[1]!)).toBe(SESSIONS.length);
    const again = [await open(url, acme.key, batch.id), await open(url, acme.key, batch.id)];
    expect(again.map((reader) => reader.status)).toEqual([200, 200]);
    expect(await Promise.all(again.map(readAll))).toEqual([SESSIONS.length, SESSIONS.length]);
  }, 90_000);

  it("a read whose key is revoked gives its place back", async () => {
    const { url, keys, clientOf } = setup;
    const first = await keys.create("revoked");
    const second = await keys.create("revoked");
    const batch = await clientOf(first.key).createBatch(SESSIONS);
    const held = [await open(url, first.key, batch.id), await open(url, first.key, batch.id)];
    expect(held.map((reader) => reader.status)).toEqual([200, 200]);
    expect((await open(url, second.key, batch.id)).status).toBe(429);
    await keys.revoke(first.id);
    let reader: Reader | undefined;
    await waitFor(
      async () => {
        reader = await open(url, second.key, batch.id);
        return reader.status === 200;
      },
      30_000,
      "a read of the tenant admitted once the revoked key's reads ended",
    );
    expect(await readAll(reader!)).toBe(SESSIONS.length);
  }, 60_000);
});

describe("results reads per tenant, a reader that takes nothing", () => {
  let setup: Awaited<ReturnType<typeof fleetOf>>;
  beforeAll(async () => {
    setup = await fleetOf("resultsreadsstall", { FLEET_SSE_STALL_MS: "3000" });
  }, 60_000);
  afterAll(() => setup?.fleet.close());

  it("cut after FLEET_SSE_STALL_MS, gives its place back", async () => {
    const { url, acme, clientOf } = setup;
    const batch = await clientOf(acme.key).createBatch(SESSIONS);
    const held = [await open(url, acme.key, batch.id), await open(url, acme.key, batch.id)];
    expect(held.map((reader) => reader.status)).toEqual([200, 200]);
    expect((await open(url, acme.key, batch.id)).status).toBe(429);
    // Neither reads: both are cut, and a client that reads is let in and gets every line.
    const lines: string[] = [];
    for await (const result of clientOf(acme.key).batchResults(batch.id)) lines.push(result.customId ?? "");
    expect(lines).toEqual(SESSIONS.map((session) => session.customId));
  }, 60_000);
});
