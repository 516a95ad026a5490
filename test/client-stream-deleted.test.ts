/**
 * `fleet.stream()` (contracts §7: it "sends and yields events up to that run's RUN_COMPLETED")
 * on a session deleted before its run started: the run never starts and has no RUN_COMPLETED;
 * the session's stream ends with SESSION_DELETED (README "Deleting data and retention"). The
 * iterator skipped every event before its run's own, that one too, and ended with nothing —
 * no event, no error — so a caller waiting for the run's end learnt neither that it would not
 * come nor why. Now it yields SESSION_DELETED, its last event, as `fleet.events()` does.
 */
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import type { FleetEvent } from "../src/producer/client.js";
import { createFleetEnv, type FleetEnv, waitFor } from "./support/fleet-env.js";

describe("stream() on a session deleted before its run starts", () => {
  let fleet: FleetEnv;
  beforeAll(async () => {
    fleet = await createFleetEnv("clientstreamdeleted");
  }, 60_000);
  afterAll(() => fleet?.close());

  it("yields SESSION_DELETED last, not an empty iteration", async () => {
    // No worker: the run stays queued.
    const { client, api } = await fleet.startApi();
    const { id } = await client.createSession({
      agent: { model: { provider: "scripted", steps: [{ text: "never said" }] } },
    });
    const streams = async () => {
      const text = await (await fetch(`${api.url}/metrics`)).text();
      return Number(/^fleet_sse_clients(?:\{[^}]*\})? (\d+)/m.exec(text)?.[1] ?? 0);
    };
    const seen: FleetEvent[] = [];
    const reading = (async () => {
      for await (const event of client.stream(id, "hello", { signal: AbortSignal.timeout(20_000) }))
        seen.push(event);
    })();
    // The stream is open (on the queued run) before the delete.
    await waitFor(async () => (await streams()) >= 1, 10_000, "the stream open");
    await client.deleteSession(id);
    await reading;
    expect(seen.map((e) => e.type)).toEqual(["SESSION_DELETED"]);
    expect(seen[0]?.data).toMatchObject({ sessionId: id });
  }, 30_000);
});
