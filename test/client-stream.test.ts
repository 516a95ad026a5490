/**
 * `fleet.stream()` and `fleet.streamResume()` (contracts §7) yield their run's events up to
 * its RUN_COMPLETED also when another caller queues the session's next run before the
 * stream's connection opens: a stream opened without an id starts at the latest run, which
 * is then the other caller's, not this one's.
 */
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { FleetClient, type FleetEvent, type Goal, type PostOptions } from "../src/producer/client.js";
import { createFleetEnv, type FleetEnv, waitFor } from "./support/fleet-env.js";

describe("stream() with a neighbour", () => {
  let fleet: FleetEnv;
  let base: string;

  beforeAll(async () => {
    fleet = await createFleetEnv("client-stream");
    base = (await fleet.startApi()).api.url;
    await fleet.spawnWorker();
  }, 60_000);
  afterAll(() => fleet?.close());

  /** A client whose send lets its run start, then queues another message from "another tab". */
  class Neighbour extends FleetClient {
    override async send(
      sessionId: string,
      content: string,
      options: PostOptions & { goal?: Goal } = {},
    ): Promise<{ runId: string }> {
      const sent = await super.send(sessionId, content, options);
      if (content === "first") {
        await waitFor(async () => (await this.getRun(sent.runId)).status !== "queued", 10_000, "run start");
        await super.send(sessionId, "second");
      }
      return sent;
    }
  }

  it("yields its own run from RUN_STARTED to RUN_COMPLETED while the next run is already queued", async () => {
    const client = new Neighbour({ baseUrl: base });
    const { id } = await client.createSession({
      agent: {
        model: {
          provider: "scripted",
          steps: [
            { toolCalls: [{ id: "nap", name: "sleep", arguments: { ms: 1_500 } }] },
            { text: "first done" },
            { text: "second done" },
          ],
        },
        tools: ["sleep"],
      },
    });
    const got: FleetEvent[] = [];
    for await (const event of client.stream(id, "first", { signal: AbortSignal.timeout(15_000) }))
      got.push(event);
    expect(got.map((e) => e.type)).toContain("TOOL_STARTED");
    expect(got[0]).toMatchObject({ type: "RUN_STARTED" });
    expect(got.at(-1)).toMatchObject({ type: "RUN_COMPLETED", data: { outcome: "completed" } });
    const runIds = new Set(got.map((e) => e.data.runId));
    expect(runIds.size).toBe(1);
    const session = await client.getSession(id);
    expect(session.runs[0]!.id).toBe([...runIds][0]);
  }, 30_000);

  it("a stream stopped before it opened queues nothing", async () => {
    const client = new FleetClient({ baseUrl: base });
    const { id } = await client.createSession({
      agent: { model: { provider: "scripted", steps: [{ text: "never" }] } },
    });
    const got: FleetEvent[] = [];
    for await (const event of client.stream(id, "stop", { signal: AbortSignal.abort() })) got.push(event);
    expect(got).toEqual([]);
    expect((await client.getSession(id)).runs).toEqual([]);
  });
});
