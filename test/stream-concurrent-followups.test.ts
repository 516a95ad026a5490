/**
 * `fleet.stream(sessionId, content)` (contracts §7) yields the events of the run its message
 * queued, from its RUN_STARTED to its RUN_COMPLETED, also when other follow-up messages to
 * the session arrive meanwhile. The client used to open the session's stream without an
 * id, which starts at the RUN_STARTED of the session's *latest* run: when another message
 * was queued between its send and its connect (a client some milliseconds away) while its
 * own run had already started, it started after its own RUN_STARTED and waited for ever.
 * It now names its run (`?run=RUN_ID`): the stream starts at that run's RUN_STARTED, or at
 * the stream's end while the run waits in the queue.
 */
import { writeFile } from "node:fs/promises";
import { join } from "node:path";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { FleetClient, type FleetEvent } from "../src/producer/client.js";
import type { ScriptedStep } from "../src/shared/agent-config.js";
import { EventReader } from "../src/shared/event-reader.js";
import { eventStreamKey } from "../src/shared/events.js";
import { type ApiProxy, startApiProxy } from "./support/api-proxy.js";
import { createFleetEnv, type FleetEnv, ROOT, waitFor } from "./support/fleet-env.js";
import { readSse } from "./support/sse.js";

/** A proxy to the API that holds each event-stream request until `hold()` settles (a client far away). */
function heldEventsProxy(target: string, hold: () => Promise<unknown>): Promise<ApiProxy> {
  return startApiProxy(target, (req, _res, forward) => {
    if (req.url?.includes("/events")) void hold().then(forward);
    else forward();
  });
}

describe("stream() with concurrent follow-up messages", () => {
  let fleet: FleetEnv;
  let client: FleetClient;
  let base: string;
  let proxy: ApiProxy;

  beforeAll(async () => {
    fleet = await createFleetEnv("streamfollowups");
    const started = await fleet.startApi();
    client = started.client;
    base = started.api.url;
    proxy = await heldEventsProxy(base, () => new Promise((resolve) => setTimeout(resolve, 400)));
    await fleet.spawnWorker();
  }, 60_000);
  afterAll(async () => {
    proxy?.server.closeAllConnections();
    proxy?.server.close();
    await fleet?.close();
  });

  it("yields its own run's events when another message is queued between its send and its connect", async () => {
    const { id } = await client.createSession({
      agent: {
        model: {
          provider: "scripted",
          steps: [{ text: "first answer", delayMs: 800 }, { text: "second answer" }],
        },
      },
    });
    const far = new FleetClient({ baseUrl: proxy.url });
    const events: FleetEvent[] = [];
    const streaming = (async () => {
      for await (const event of far.stream(id, "first question", { signal: AbortSignal.timeout(15_000) }))
        events.push(event);
    })();
    // Its run starts at once; another follow-up arrives while its stream request is on its way.
    await waitFor(
      async () => (await client.getSession(id)).runs.some((r) => r.status === "running"),
      10_000,
      "the first run to start",
    );
    const second = await client.send(id, "second question");
    await client.waitForRun(second.runId, { timeoutMs: 15_000 });
    await streaming;

    const runId = (await client.getSession(id)).runs[0]!.id;
    expect(events[0]).toMatchObject({ type: "RUN_STARTED", data: { runId } });
    expect(events.at(-1)).toMatchObject({ type: "RUN_COMPLETED", data: { runId, outcome: "completed" } });
    expect(events.filter((e) => e.type === "MESSAGE").map((e) => e.data.message.content)).toEqual([
      "first question",
      "first answer",
    ]);
  }, 30_000);

  it("?run= starts at that run's RUN_STARTED, at the end while it is queued; another session's run is a 404", async () => {
    const { id } = await client.createSession({
      agent: { model: { provider: "scripted", steps: [{ text: "one" }, { text: "two", delayMs: 300 }] } },
    });
    const first = await client.send(id, "q1");
    await client.waitForRun(first.runId);
    const second = await client.send(id, "q2");
    await client.waitForRun(second.runId);
    const url = (run: string) => `${base}/v1/sessions/${id}/events?run=${run}`;
    const ofFirst = await readSse(url(first.runId), { stop: (e) => e.type === "RUN_COMPLETED" });
    expect(ofFirst.events[0]).toMatchObject({ type: "RUN_STARTED", data: { runId: first.runId } });
    expect(ofFirst.events.at(-1)).toMatchObject({ type: "RUN_COMPLETED", data: { runId: first.runId } });

    const other = await client.createSession({
      agent: { model: { provider: "scripted", steps: [{ text: "x" }] } },
    });
    const foreign = await readSse(url((await client.send(other.id, "q")).runId), { stop: () => true });
    expect(foreign.status).toBe(404);
    const bad = await readSse(url("not-a-run"), { stop: () => true });
    expect(bad.status).toBe(404);
    // An empty run id, or one with a space in it, is named quoted: "run  1 of session …" showed nothing.
    for (const [run, said] of [
      ["", '""'],
      ["%201", '" 1"'],
      [`${first.runId}%0A`, `"${first.runId}\\n"`],
    ]) {
      const odd = await readSse(url(run!), { stop: () => true });
      expect(odd.status).toBe(404);
      expect((odd.body as { error: { message: string } }).error.message).toBe(
        `run ${said} of session ${id} not found`,
      );
    }
  }, 30_000);
});

describe("stream() of a run whose first events are no longer kept", () => {
  let fleet: FleetEnv;
  let client: FleetClient;
  let proxy: ApiProxy;
  /** Lets the event-stream requests held by `proxy` go on to the API. */
  let connect!: () => void;
  const connected = new Promise<void>((resolve) => {
    connect = resolve;
  });

  beforeAll(async () => {
    // Retention far below one run's events (MAXLEN ~ trims whole nodes of 100 entries).
    fleet = await createFleetEnv("streamtrimmed", { env: { FLEET_EVENTS_MAX: "20" } });
    const started = await fleet.startApi();
    client = started.client;
    proxy = await heldEventsProxy(started.api.url, () => connected);
    await fleet.spawnWorker({}, ["--tools", join(ROOT, "test/fixtures/gate-tool.ts")]);
  }, 60_000);
  afterAll(async () => {
    proxy?.server.closeAllConnections();
    proxy?.server.close();
    await fleet?.close();
  });

  it("yields the rest of its run up to its RUN_COMPLETED", async () => {
    const steps: ScriptedStep[] = [];
    for (let i = 0; i < 80; i++) steps.push({ toolCalls: [{ name: "sleep", arguments: { ms: 1 } }] });
    steps.push({ toolCalls: [{ id: "g1", name: "gate", arguments: {} }] }, { text: "all 80 steps done" });
    const { id } = await client.createSession({
      agent: { model: { provider: "scripted", steps }, tools: ["sleep", "gate"], maxTurns: 100 },
    });
    const far = new FleetClient({ baseUrl: proxy.url });
    const events: FleetEvent[] = [];
    const streaming = (async () => {
      for await (const event of far.stream(id, "take 80 steps", { signal: AbortSignal.timeout(60_000) }))
        events.push(event);
    })();
    // The run's stream connects once the run waits at its gate, its first events trimmed away.
    // The worker goes on only then, with a few events left to write: an API slowed by a loaded
    // machine cannot fall behind the trimming (as it did while the worker wrote its 80 steps,
    // and its reconnect got the 410 that contracts §7 gives a place no longer kept).
    const reader = new EventReader(fleet.redis, fleet.config.prefix);
    const key = eventStreamKey(fleet.config.prefix, id);
    const newest = async () => {
      const last = await reader.lastId(key);
      return last === null ? undefined : (await reader.from(key, last, 1))[0];
    };
    await waitFor(
      async () => (await newest())?.data.name === "gate",
      60_000,
      "the run waiting at its gate (its TOOL_STARTED the stream's newest event)",
    );
    const runId = (await client.getSession(id)).runs[0]!.id;
    expect(await reader.runStartedId(id, runId)).toBeNull();
    const gate = await newest();
    expect(gate).toMatchObject({ type: "TOOL_STARTED", data: { runId, name: "gate" } });
    connect();
    await writeFile(join(fleet.env.FLEET_TOOL_DIR!, "open-g1"), "");
    await streaming;

    expect(events.some((e) => e.type === "RUN_STARTED")).toBe(false);
    expect(events.every((e) => e.data.runId === runId)).toBe(true);
    // From the first event kept, not from the end: what was written before it connected too.
    expect(events.map((e) => e.id)).toContain(gate!.id);
    expect(events.at(-1)).toMatchObject({ type: "RUN_COMPLETED", data: { runId, outcome: "completed" } });
  }, 90_000);
});
