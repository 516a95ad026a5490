/**
 * A model server that sends no tool call ids (the worker names each step's first call
 * `call_0`: step-message.ts) or reuses them from step to step: the store keeps each step's
 * calls apart (`call_seq`), and so must the client's streams. `stream()` and `events()` left
 * out a step's TOOL_STARTED and TOOL_FINISHED when an earlier step's call had had the same id,
 * with no 410 and no re-read at all: their filter of what a re-read brings again keyed a tool
 * call by its id alone (stream-reread.ts).
 */
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { FleetClient, type FleetEvent } from "../src/producer/client.js";
import { createFleetEnv, type FleetEnv } from "./support/fleet-env.js";

const agent = {
  model: {
    provider: "scripted" as const,
    steps: [
      { toolCalls: [{ id: "a", name: "sleep", arguments: { ms: 10 } }] },
      { toolCalls: [{ id: "a", name: "sleep", arguments: { ms: 10 } }] },
      { text: "done" },
      { toolCalls: [{ id: "a", name: "sleep", arguments: { ms: 10 } }] },
      { text: "done again" },
    ],
  },
  tools: ["sleep"],
};

const toolEvents = (events: FleetEvent[]) =>
  events.flatMap((e) => (e.type === "TOOL_STARTED" || e.type === "TOOL_FINISHED" ? [e.type] : []));

describe("tool calls of different steps under one id", () => {
  let fleet: FleetEnv;
  let client: FleetClient;

  beforeAll(async () => {
    fleet = await createFleetEnv("repeated-call-ids");
    client = new FleetClient({ baseUrl: (await fleet.startApi()).api.url });
    await fleet.spawnWorker();
  }, 60_000);
  afterAll(() => fleet?.close());

  it("stream() and events() yield each step's TOOL_STARTED and TOOL_FINISHED", async () => {
    const { id } = await client.createSession({ agent });
    const controller = new AbortController();
    const followed: FleetEvent[] = [];
    const following = (async () => {
      for await (const event of client.events(id, { signal: controller.signal })) {
        followed.push(event);
        if (event.type === "RUN_COMPLETED" && followed.filter((e) => e.type === "RUN_COMPLETED").length === 2)
          break;
      }
    })();
    const first: FleetEvent[] = [];
    for await (const event of client.stream(id, "go", { signal: AbortSignal.timeout(20_000) }))
      first.push(event);
    expect(first.at(-1)).toMatchObject({ type: "RUN_COMPLETED", data: { outcome: "completed" } });
    expect(toolEvents(first)).toEqual(["TOOL_STARTED", "TOOL_FINISHED", "TOOL_STARTED", "TOOL_FINISHED"]);
    const second: FleetEvent[] = [];
    for await (const event of client.stream(id, "again", { signal: AbortSignal.timeout(20_000) }))
      second.push(event);
    expect(toolEvents(second)).toEqual(["TOOL_STARTED", "TOOL_FINISHED"]);
    await Promise.race([following, new Promise((resolve) => setTimeout(resolve, 10_000))]);
    controller.abort();
    expect(toolEvents(followed)).toEqual([...toolEvents(first), ...toolEvents(second)]);
  }, 60_000);
});
