/**
 * Contracts §7: "Without an id the stream starts at the RUN_STARTED of the session's latest
 * run." A message sent while a run is running queues the latest run behind it; a reader that
 * connects then used to start at the stream's end and receive the running run's deltas,
 * message and RUN_COMPLETED without its RUN_STARTED. It starts at the running run's
 * RUN_STARTED now, and the queued run's events follow.
 */
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import type { FleetClient } from "../src/producer/client.js";
import { createFleetEnv, type FleetEnv, waitFor } from "./support/fleet-env.js";
import { readSse } from "./support/sse.js";

const AGENT = {
  model: {
    provider: "scripted" as const,
    steps: [{ text: "the first answer, slowly", delayMs: 3_000 }, { text: "the second answer" }],
  },
};

describe("a session's stream read without an id while its latest run is queued", () => {
  let fleet: FleetEnv;
  let client: FleetClient;
  let base: string;

  beforeAll(async () => {
    fleet = await createFleetEnv("eventsqueued");
    const started = await fleet.startApi();
    client = started.client;
    base = started.api.url;
    await fleet.spawnWorker();
  }, 60_000);
  afterAll(() => fleet?.close());

  it("starts at the RUN_STARTED of the run still running, then follows the queued one", async () => {
    const { id } = await client.createSession({ agent: AGENT });
    const first = await client.send(id, "one");
    await waitFor(
      async () => (await client.getSession(id)).runs[0]?.status === "running",
      10_000,
      "the first run to start",
    );
    const second = await client.send(id, "two");
    expect((await client.getSession(id)).runs.map((r) => r.status)).toEqual(["running", "queued"]);

    const read = await readSse(`${base}/v1/sessions/${id}/events`, {
      stop: (event) => event.type === "RUN_COMPLETED" && event.data.runId === second.runId,
      timeoutMs: 20_000,
    });
    expect(read.status).toBe(200);
    const events = read.events.filter((e) => e.type !== "MESSAGE_DELTA");
    expect(read.events[0]).toMatchObject({ type: "RUN_STARTED", data: { runId: first.runId } });
    expect(events.map((e) => [e.type, e.data.runId])).toEqual([
      ["RUN_STARTED", first.runId],
      ["MESSAGE", first.runId],
      ["MESSAGE", first.runId],
      ["RUN_COMPLETED", first.runId],
      ["RUN_STARTED", second.runId],
      ["MESSAGE", second.runId],
      ["MESSAGE", second.runId],
      ["RUN_COMPLETED", second.runId],
    ]);
    const contents = events
      .filter((e) => e.type === "MESSAGE")
      .map((e) => (e.data.message as { content: string }).content);
    expect(contents).toEqual(["one", "the first answer, slowly", "two", "the second answer"]);
  }, 40_000);
});
