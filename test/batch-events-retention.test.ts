/**
 * A batch's event stream holds one SESSION_ENDED per session (contracts §7), however many
 * sessions the batch has: the per-session retention (`FLEET_EVENTS_MAX`) must not trim it,
 * or a reader of a batch larger than that silently misses the first sessions' ends (a batch
 * of 12,000 sessions gave 10,005 SESSION_ENDED and then BATCH_COMPLETED).
 */
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import type { FleetClient } from "../src/producer/client.js";
import { createFleetEnv, type FleetEnv } from "./support/fleet-env.js";
import { readSse } from "./support/sse.js";

const AGENT = { model: { provider: "scripted" as const, steps: [{ text: "ok" }] } };

describe("batch events retention", () => {
  let fleet: FleetEnv;
  let base: string;
  let client: FleetClient;

  beforeAll(async () => {
    // Per-session retention far below the batch's size.
    fleet = await createFleetEnv("batchevretention", { env: { FLEET_EVENTS_MAX: "20" } });
    const started = await fleet.startApi();
    base = started.api.url;
    client = started.client;
  }, 60_000);
  afterAll(() => fleet?.close());

  it("streams a SESSION_ENDED for every session of a batch larger than FLEET_EVENTS_MAX", async () => {
    // Sessions without input are terminal (completed) at once: no worker is needed.
    const sessions = Array.from({ length: 150 }, (_, i) => ({ agent: AGENT, customId: `c${i}` }));
    const batch = await client.createBatch(sessions);
    const read = await readSse(`${base}/v1/batches/${batch.id}/events`, {
      stop: (e) => e.type === "BATCH_COMPLETED",
      timeoutMs: 20_000,
    });
    const ended = read.events.filter((e) => e.type === "SESSION_ENDED").map((e) => e.data.customId as string);
    expect(ended.length).toBe(150);
    expect(new Set(ended)).toEqual(new Set(sessions.map((s) => s.customId)));
    expect(read.events.at(-1)).toMatchObject({ type: "BATCH_COMPLETED", data: { counts: { total: 150 } } });
    // Resuming after the first event still finds it kept (no 410) and gives exactly the rest.
    const rest = await readSse(`${base}/v1/batches/${batch.id}/events`, {
      after: read.events[0]!.id,
      stop: (e) => e.type === "BATCH_COMPLETED",
    });
    expect(rest.status).toBe(200);
    expect(rest.events.map((e) => e.id)).toEqual(read.events.slice(1).map((e) => e.id));
  }, 40_000);
});
