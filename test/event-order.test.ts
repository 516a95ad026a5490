/**
 * The order of a session's events (contracts §7) as a UI renders them: a step's
 * MESSAGE_DELTAs stream its text, and its MESSAGE (the committed message) closes it. A delta
 * that comes after its step's MESSAGE would be drawn as new text after the message.
 */
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import type { FleetClient, FleetEvent } from "../src/producer/client.js";
import { createFleetEnv, type FleetEnv } from "./support/fleet-env.js";

describe("event order", () => {
  let fleet: FleetEnv;
  let client: FleetClient;

  beforeAll(async () => {
    fleet = await createFleetEnv("event-order");
    client = (await fleet.startApi()).client;
    await fleet.spawnWorker();
  }, 60_000);
  afterAll(() => fleet?.close());

  it("a step's MESSAGE_DELTAs all come before its MESSAGE, none after", async () => {
    const { id } = await client.createSession({
      agent: {
        model: {
          provider: "scripted",
          steps: [
            {
              text: "writing the log",
              toolCalls: [{ id: "log", name: "append_file", arguments: { path: "order.txt", line: "x" } }],
            },
            { text: "all done" },
          ],
        },
        tools: ["append_file"],
      },
    });
    const events: FleetEvent[] = [];
    for await (const event of client.stream(id, "go", { signal: AbortSignal.timeout(15_000) }))
      events.push(event);
    expect(events.at(-1)?.type).toBe("RUN_COMPLETED");
    let streamed = "";
    const steps: string[] = [];
    for (const event of events) {
      if (event.type === "MESSAGE_DELTA") streamed += event.data.text;
      else if (event.type === "MESSAGE" && event.data.message.role === "assistant") {
        expect(streamed, `the deltas before "${event.data.message.content}"`).toBe(
          event.data.message.content,
        );
        steps.push(streamed);
        streamed = "";
      } else expect(streamed, `a delta left open at ${event.type}`).toBe("");
    }
    expect(steps).toEqual(["writing the log", "all done"]);
  }, 30_000);
});
