/**
 * `?run=RUN_ID` of a run that ended without ever starting (a cancel dropped it while it was
 * queued): its only event is its RUN_COMPLETED, and the stream starts there. Before, such a
 * run was taken for one whose RUN_STARTED is no longer kept and read from the stream's first
 * event kept: its reader was handed every earlier run's events (their messages, tool calls and
 * ends) as if they were this run's, up to FLEET_EVENTS_MAX of them. `fleet.events(id, { run })`
 * reads through the same route.
 */
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import type { FleetClient, FleetEvent } from "../src/producer/client.js";
import { createFleetEnv, type FleetEnv, waitFor } from "./support/fleet-env.js";
import { readSse } from "./support/sse.js";

const AGENT = { model: { provider: "scripted" as const, steps: [{ text: "one" }] } };

describe("?run= of a run a cancel dropped before it started", () => {
  let fleet: FleetEnv;
  let client: FleetClient;
  let base: string;

  beforeAll(async () => {
    fleet = await createFleetEnv("eventsrunneverstarted");
    const started = await fleet.startApi();
    client = started.client;
    base = started.api.url;
  }, 60_000);
  afterAll(() => fleet?.close());

  it("starts at its RUN_COMPLETED, not at the earlier runs' events", async () => {
    const session = await client.createSession({ agent: AGENT });
    // A first run, run to its end by a worker: the stream holds its events.
    const worker = await fleet.spawnWorker();
    const { runId: first } = await client.send(session.id, "first");
    await waitFor(async () => (await client.getRun(first)).status === "ended", 30_000, "the first run's end");
    worker.child.kill("SIGTERM");
    await worker.exited;
    // A second run, queued with no worker, and dropped by a cancel: it never starts.
    const { runId: second } = await client.send(session.id, "second");
    await client.cancelSession(session.id);
    expect(await client.getRun(second)).toMatchObject({ status: "ended", endedReason: "cancelled" });

    const ofSecond = (event: FleetEvent) => event.type === "RUN_COMPLETED" && event.data.runId === second;
    const read = await readSse(`${base}/v1/sessions/${session.id}/events?run=${second}`, {
      stop: ofSecond,
      timeoutMs: 10_000,
    });
    expect(read.events.map((e) => [e.type, e.data.runId === second ? "second" : "first"])).toEqual([
      ["RUN_COMPLETED", "second"],
    ]);
    expect(read.events[0]!.data.outcome).toBe("cancelled");

    // The client's events() with that run reads the same.
    const controller = new AbortController();
    const yielded: string[] = [];
    for await (const event of client.events(session.id, { run: second, signal: controller.signal })) {
      yielded.push(`${event.type}:${event.data.runId === second ? "second" : "first"}`);
      if (ofSecond(event)) break;
    }
    expect(yielded).toEqual(["RUN_COMPLETED:second"]);

    // The first run, named, still starts at its RUN_STARTED.
    const again = await readSse(`${base}/v1/sessions/${session.id}/events?run=${first}`, {
      stop: (event) => event.type === "RUN_COMPLETED",
      timeoutMs: 10_000,
    });
    expect(again.events[0]).toMatchObject({ type: "RUN_STARTED", data: { runId: first } });
  }, 90_000);
});
