/**
 * A batch's event stream read live ends with its BATCH_COMPLETED: nothing follows it (each
 * session's first end only, all written before it; batch-events-after-end.test.ts answers a
 * reconnect after it 204). Before, the response stayed open with a heartbeat every
 * FLEET_SSE_HEARTBEAT_MS for as long as the reader stayed: `curl -N …/events`, or a script
 * reading the stream to its end, never finished once the batch had, and each such reader held
 * one of its tenant's FLEET_SSE_MAX_STREAMS_PER_TENANT places (`fleet_sse_clients` stayed up).
 */
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import type { FleetClient } from "../src/producer/client.js";
import { createFleetEnv, type FleetEnv, waitFor } from "./support/fleet-env.js";
import { answeredEntries } from "./support/histories.js";
import { sseClients } from "./support/sse.js";

const AGENT = { model: { provider: "scripted" as const, steps: [{ text: "ok" }] } };
/** Sessions whose history ends with a final answer: the batch has ended once it is closed. */
const ENDED = answeredEntries(AGENT);

/** Reads a raw event stream until the API ends it, or `waitMs` passes: the event types and whether it ended. */
async function readToEnd(
  url: string,
  waitMs: number,
): Promise<{ status: number; types: string[]; ended: boolean }> {
  const controller = new AbortController();
  const timer = setTimeout(() => controller.abort(), waitMs);
  const response = await fetch(url, { headers: { accept: "text/event-stream" }, signal: controller.signal });
  let text = "";
  let ended = false;
  try {
    for await (const chunk of response.body as AsyncIterable<Uint8Array>)
      text += Buffer.from(chunk).toString();
    ended = true;
  } catch (error) {
    if (!controller.signal.aborted) throw error;
  } finally {
    clearTimeout(timer);
  }
  const types = [...text.matchAll(/^event: (\S+)$/gm)].map((m) => m[1]!);
  return { status: response.status, types, ended };
}

describe("a batch's event stream read live", () => {
  let fleet: FleetEnv;
  let client: FleetClient;
  let base: string;

  beforeAll(async () => {
    // Heartbeats every 200 ms: a stream left open past its end shows within the wait below.
    fleet = await createFleetEnv("batchevlive", { env: { FLEET_SSE_HEARTBEAT_MS: "200" } });
    const started = await fleet.startApi();
    client = started.client;
    base = started.api.url;
  }, 60_000);
  afterAll(() => fleet?.close());

  it("ends after BATCH_COMPLETED, read from the start of an ended batch", async () => {
    const batch = await client.createBatch(ENDED);
    const read = await readToEnd(`${base}/v1/batches/${batch.id}/events`, 5_000);
    expect(read).toEqual({
      status: 200,
      types: ["SESSION_ENDED", "SESSION_ENDED", "BATCH_COMPLETED"],
      ended: true,
    });
    await waitFor(async () => (await sseClients(base)) === 0, 5_000, "the reader's place freed");
  }, 30_000);

  it("ends after BATCH_COMPLETED, open while the batch ends", async () => {
    const batch = await client.createBatch(ENDED, { open: true });
    const reading = readToEnd(`${base}/v1/batches/${batch.id}/events`, 8_000);
    // The reader is there (its sessions' ends written) before the batch is closed.
    await waitFor(async () => (await sseClients(base)) === 1, 5_000, "the reader connected");
    await new Promise((resolve) => setTimeout(resolve, 1_500));
    await client.appendToBatch(batch.id, [], { close: true });
    const read = await reading;
    expect(read).toEqual({
      status: 200,
      types: ["SESSION_ENDED", "SESSION_ENDED", "BATCH_COMPLETED"],
      ended: true,
    });
    await waitFor(async () => (await sseClients(base)) === 0, 5_000, "the reader's place freed");
    // Its reconnect after the end is the 204 that tells an event-stream client to stop.
    expect((await client.getBatch(batch.id)).status).toBe("ended");
  }, 30_000);
});
