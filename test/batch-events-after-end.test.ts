/**
 * A batch's event stream resumed after its BATCH_COMPLETED (a backend that read the end,
 * crashed before it noted it, and reconnects with the id it stored): nothing but the batch's
 * end remains, yet the stream stayed open with heartbeats and `fleet.batchEvents(id, { after })`
 * waited for ever. The API now answers 204 No Content — the status that tells an event-stream
 * client to stop reconnecting — and batchEvents() returns. A reader after an earlier event
 * still gets the rest, BATCH_COMPLETED last.
 */
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import type { FleetClient } from "../src/producer/client.js";
import { createFleetEnv, type FleetEnv } from "./support/fleet-env.js";
import { answeredEntries } from "./support/histories.js";

const AGENT = { model: { provider: "scripted" as const, steps: [{ text: "ok" }] } };
/** Sessions whose history ends with a final answer: the batch has ended once it is created. */
const ENDED = answeredEntries(AGENT);

describe("a batch's events resumed after BATCH_COMPLETED", () => {
  let fleet: FleetEnv;
  let client: FleetClient;
  let base: string;

  beforeAll(async () => {
    fleet = await createFleetEnv("batchevend");
    const started = await fleet.startApi();
    client = started.client;
    base = started.api.url;
  }, 60_000);
  afterAll(() => fleet?.close());

  it("ends at once: 204 for the raw route, batchEvents() returns with nothing", async () => {
    const batch = await client.createBatch(ENDED);
    const first: { id: string; type: string }[] = [];
    for await (const event of client.batchEvents(batch.id)) first.push({ id: event.id, type: event.type });
    expect(first.map((event) => event.type)).toEqual(["SESSION_ENDED", "SESSION_ENDED", "BATCH_COMPLETED"]);
    const end = first[2]!.id;

    const raw = await fetch(`${base}/v1/batches/${batch.id}/events`, {
      headers: { "last-event-id": end },
      signal: AbortSignal.timeout(10_000),
    });
    expect(raw.status).toBe(204);

    const again: string[] = [];
    const giveUp = new AbortController();
    const timer = setTimeout(() => giveUp.abort(), 10_000);
    for await (const event of client.batchEvents(batch.id, { after: end, signal: giveUp.signal }))
      again.push(event.type);
    clearTimeout(timer);
    expect({ aborted: giveUp.signal.aborted, again }).toEqual({ aborted: false, again: [] });

    // After an earlier event, the rest comes, the batch's end last.
    const rest: string[] = [];
    for await (const event of client.batchEvents(batch.id, { after: first[0]!.id })) rest.push(event.type);
    expect(rest).toEqual(["SESSION_ENDED", "BATCH_COMPLETED"]);
  }, 60_000);
});
