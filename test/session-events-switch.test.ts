/**
 * `PATCH /v1/sessions/:id` `{ "sessionEvents": true | false }`: a session's event stream turned
 * on after its creation holds every stored message at once and its next run's events, whole
 * and in order; turned off, the stream and its seq key are gone, an open reader ends, a new
 * one gets 409 and later runs write nothing. On is refused for a session of a batch created
 * without streams; another tenant's session is not found; a deleted session's tombstone stays.
 * A real worker runs every session.
 */
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { startApi } from "../src/producer/api-server.js";
import type { FleetClient, FleetEvent } from "../src/producer/client.js";
import { EventWriter } from "../src/shared/event-writer.js";
import { eventStreamKey } from "../src/shared/events.js";
import { SessionEventsSetting } from "../src/shared/store/session-events-setting.js";
import { runFleetCli } from "./support/fleet-cli.js";
import { createFleetEnv, type FleetEnv, waitFor } from "./support/fleet-env.js";
import { readSse } from "./support/sse.js";

/** One tool call (a file written), then the answer: a run that writes every kind of event. */
const agent = (i: number) => ({
  model: {
    provider: "scripted" as const,
    steps: [
      { toolCalls: [{ name: "write_file", arguments: { path: `switch-${i}.txt`, content: `${i}\n` } }] },
      { text: `done ${i}` },
    ],
  },
  tools: ["write_file"],
});

describe("PATCH /v1/sessions/:id sessionEvents", () => {
  let fleet: FleetEnv;
  let client: FleetClient;
  let base: string;

  beforeAll(async () => {
    fleet = await createFleetEnv("evswitch");
    const started = await fleet.startApi();
    client = started.client;
    base = started.api.url;
    await fleet.spawnWorker();
  }, 60_000);
  afterAll(() => fleet?.close());

  const seqKey = (id: string) => `${fleet.config.prefix}:events-seq:${id}`;
  const hasStreamKeys = async (id: string) =>
    (await fleet.redis.exists(eventStreamKey(fleet.config.prefix, id), seqKey(id))) > 0;
  /** Turned off: no stream, and its seq record is the `off` marker alone. */
  const isMarkedOff = async (id: string) =>
    (await fleet.redis.exists(eventStreamKey(fleet.config.prefix, id))) === 0 &&
    JSON.stringify(await fleet.redis.hgetall(seqKey(id))) === JSON.stringify({ off: "1" });
  const patch = (id: string, body: unknown) =>
    fetch(`${base}/v1/sessions/${id}`, {
      method: "PATCH",
      headers: { "content-type": "application/json" },
      body: JSON.stringify(body),
    });
  const runsEnded = (id: string, n: number) => async () =>
    (await client.getSession(id)).runs.filter((r) => r.status === "ended").length === n;
  /** The seqs of the stream's MESSAGE events, in stream order. */
  const messageSeqs = (events: FleetEvent[]) =>
    events.filter((e) => e.type === "MESSAGE").map((e) => (e.data.message as { seq: number }).seq);

  it("turned on, the stream holds the stored history at once, then the next run's events; turned off, it is gone and its reader ends", async () => {
    const { id } = await client.createSession({ agent: agent(1), sessionEvents: false });
    await client.send(id, "go");
    await waitFor(runsEnded(id, 1), 30_000, "the first run to end");
    expect(await hasStreamKeys(id)).toBe(false);

    // On: the answer comes once the four stored messages are in the stream.
    const on = await patch(id, { sessionEvents: true });
    expect(on.status).toBe(200);
    expect(await on.json()).toEqual({ id, sessionEvents: true });
    expect((await client.getSession(id)).sessionEvents).toBeUndefined();
    const before = await readSse(`${base}/v1/sessions/${id}/events`, {
      after: "0-0",
      stop: (_e, all) => messageSeqs(all).length === 4,
      timeoutMs: 10_000,
    });
    expect(before.status).toBe(200);
    expect(messageSeqs(before.events)).toEqual([1, 2, 3, 4]);

    // The next run is written as it goes, after them: every message once, in order.
    const { runId } = await client.send(id, "again");
    const all = await readSse(`${base}/v1/sessions/${id}/events`, {
      after: "0-0",
      stop: (e) => e.type === "RUN_COMPLETED" && (e.data as { runId: string }).runId === runId,
      timeoutMs: 30_000,
    });
    const stored = (await client.getSession(id)).messages.map((m) => m.seq);
    expect(stored.length).toBeGreaterThan(4);
    expect(messageSeqs(all.events)).toEqual(stored);
    // The run's own events, from its start to its end, around its messages.
    const types = all.events.map((e) => e.type);
    const started = all.events.findIndex(
      (e) => e.type === "RUN_STARTED" && (e.data as { runId: string }).runId === runId,
    );
    expect(started).toBeGreaterThan(3);
    expect(types.slice(started, started + 2)).toEqual(["RUN_STARTED", "MESSAGE"]);
    expect(types.at(-1)).toBe("RUN_COMPLETED");

    // Off, while a reader waits for more: the reader ends, the keys are gone, a new reader gets 409.
    // (Within 10 s: the heartbeat, 15 s, is not what ends it here; the drop's wake is.)
    const reader = readSse(`${base}/v1/sessions/${id}/events`, {
      after: "0-0",
      stop: () => false,
      timeoutMs: 10_000,
    });
    await waitFor(
      async () => /^fleet_sse_clients\S* 1$/m.test(await (await fetch(`${base}/metrics`)).text()),
      10_000,
      "the reader to be open",
    );
    const off = await patch(id, { sessionEvents: false });
    expect(await off.json()).toEqual({ id, sessionEvents: false });
    const ended = await reader;
    expect(ended.status).toBe(200);
    expect(messageSeqs(ended.events)).toEqual(stored);
    expect(await isMarkedOff(id)).toBe(true);
    expect((await client.getSession(id)).sessionEvents).toBe(false);
    const refused = await readSse(`${base}/v1/sessions/${id}/events`, { stop: () => true });
    expect(refused.status).toBe(409);
    expect(refused.body).toMatchObject({ error: { reason: "session_events_off" } });
    // Its next run writes nothing.
    await client.send(id, "once more");
    await waitFor(runsEnded(id, 3), 30_000, "the third run to end");
    expect(await isMarkedOff(id)).toBe(true);
    // Setting it again to what it is changes nothing and is no error.
    const again = await patch(id, { sessionEvents: false });
    expect(again.status).toBe(200);
  }, 90_000);

  it("a reader of a stream turned off that no drop woke (Redis away then) ends at its next heartbeat", async () => {
    const { id } = await client.createSession({ agent: agent(8) });
    await client.send(id, "go");
    await waitFor(runsEnded(id, 1), 30_000, "the run to end");
    const quick = await startApi(
      { ...fleet.config, logLevel: "silent", events: { ...fleet.config.events, heartbeatMs: 300 } },
      { port: 0 },
    );
    try {
      const reader = readSse(`${quick.url}/v1/sessions/${id}/events`, {
        after: "0-0",
        stop: () => false,
        timeoutMs: 10_000,
      });
      await waitFor(
        async () => /^fleet_sse_clients\S* 1$/m.test(await (await fetch(`${quick.url}/metrics`)).text()),
        10_000,
        "the reader to be open",
      );
      // The setting alone, as when the PATCH committed but Redis could not be told.
      expect(await new SessionEventsSetting(fleet.database).set("default", id, false)).toEqual({
        outcome: "set",
      });
      const ended = await reader;
      expect(ended.status).toBe(200);
      expect(messageSeqs(ended.events)).toEqual([1, 2, 3, 4]);
      expect(await hasStreamKeys(id)).toBe(true);
    } finally {
      await quick.stop();
    }
  }, 60_000);

  it("on for a session of a batch created without streams is a 400; one session of a batch with streams can switch", async () => {
    const without = await client.createBatch([{ agent: agent(2), input: "go" }], { sessionEvents: false });
    const quiet = without.sessions[0]!.id;
    const refused = await patch(quiet, { sessionEvents: true });
    expect(refused.status).toBe(400);
    expect(await refused.json()).toMatchObject({ error: { field: "sessionEvents" } });
    expect((await client.getSession(quiet)).sessionEvents).toBe(false);
    // Off is no promise broken.
    expect((await patch(quiet, { sessionEvents: false })).status).toBe(200);

    const mixed = await client.createBatch([{ agent: agent(3), input: "go", sessionEvents: false }]);
    const one = mixed.sessions[0]!.id;
    await waitFor(runsEnded(one, 1), 30_000, "the batch session's run to end");
    expect(await client.setSessionEvents(one, true)).toEqual({ id: one, sessionEvents: true });
    const read = await readSse(`${base}/v1/sessions/${one}/events`, {
      after: "0-0",
      stop: (_e, all) => messageSeqs(all).length === 4,
      timeoutMs: 10_000,
    });
    expect(messageSeqs(read.events)).toEqual([1, 2, 3, 4]);
  }, 60_000);

  it("bad bodies are 400s naming the field, unknown ids 404, another tenant's session is not found", async () => {
    const { id } = await client.createSession({ agent: agent(4) });
    for (const [body, field] of [
      [{}, "sessionEvents"],
      [{ sessionEvents: "yes" }, "sessionEvents"],
      [{ sessionEvents: true, metadata: {} }, ""],
      [null, ""],
    ] as const) {
      const answer = await patch(id, body);
      expect(answer.status, JSON.stringify(body)).toBe(400);
      const json = (await answer.json()) as { error: { field?: string } };
      if (field) expect(json.error.field).toBe(field);
    }
    const missing = await patch("00000000-0000-4000-8000-000000000000", { sessionEvents: true });
    expect(missing.status).toBe(404);
    const setting = new SessionEventsSetting(fleet.database);
    expect(await setting.set("someone-else", id, false)).toEqual({ outcome: "not_found" });
    expect(await setting.isOn(id, "someone-else")).toBeNull();
    expect((await client.getSession(id)).sessionEvents).toBeUndefined();
  }, 30_000);

  it("fleet session events ID on|off sets it and prints the answer; another word, or an unknown id, exits 2", async () => {
    const { id } = await client.createSession({ agent: agent(7), sessionEvents: false });
    const on = await runFleetCli(["session", "events", id, "on", "--api", base], {});
    expect(on.code, on.stderr).toBe(0);
    expect(JSON.parse(on.stdout)).toEqual({ id, sessionEvents: true });
    expect((await client.getSession(id)).sessionEvents).toBeUndefined();
    const off = await runFleetCli(["session", "events", id, "off", "--api", base], {});
    expect(JSON.parse(off.stdout)).toEqual({ id, sessionEvents: false });
    expect((await client.getSession(id)).sessionEvents).toBe(false);
    const word = await runFleetCli(["session", "events", id, "yes", "--api", base], {});
    expect(word.code).toBe(2);
    expect(word.stderr).toMatch(/on or off/);
    expect(word.stderr).not.toMatch(/\n\s+at /);
    const unknown = await runFleetCli(
      ["session", "events", "00000000-0000-4000-8000-000000000000", "on", "--api", base],
      {},
    );
    expect(unknown.code).toBe(2);
    expect(unknown.stderr).toMatch(/^fleet session events: .*not found/m);
  }, 60_000);

  it("turning a deleted session's stream off leaves its tombstone (a late writer does not bring it back)", async () => {
    const { id } = await client.createSession({ agent: agent(5) });
    await client.send(id, "go");
    await waitFor(runsEnded(id, 1), 30_000, "the run to end");
    await client.deleteSession(id);
    await waitFor(
      async () => (await fleet.redis.hget(seqKey(id), "deleted")) !== null,
      10_000,
      "the tombstone",
    );
    const writer = new EventWriter(fleet.redis, fleet.config.prefix);
    await writer.dropStream(id);
    expect(await fleet.redis.hget(seqKey(id), "deleted")).not.toBeNull();
    // A session that was not deleted: the stream goes, its seq record is the `off` marker,
    // and a writer that has not heard of the change writes nothing, until it is on again.
    const { id: live } = await client.createSession({ agent: agent(6) });
    await client.send(live, "go");
    await waitFor(runsEnded(live, 1), 30_000, "the run to end");
    expect(await hasStreamKeys(live)).toBe(true);
    await writer.dropStream(live);
    expect(await isMarkedOff(live)).toBe(true);
    const history = (await client.getSession(live)).messages;
    const late = await writer.write(
      live,
      history.map((message) => ({ runId: null, message })),
      [{ type: "SESSION_PARKED", reason: "test" }],
    );
    expect(late).toMatchObject({ ok: true, written: 0 });
    expect(await isMarkedOff(live)).toBe(true);
    await writer.startStream(fleet.database, live);
    expect(await fleet.redis.hget(seqKey(live), "off")).toBeNull();
    expect(await fleet.redis.xlen(eventStreamKey(fleet.config.prefix, live))).toBe(history.length);
  }, 60_000);

  /**
   * Five steps, each a file written, then the answer: a run to switch during. The switch comes
   * once the first step is stored, and must come before the third tool starts: the second and
   * third model calls take a second each, as every call did (then the run took 6 s and each run
   * queued behind it, the last step repeated, 1 s more); the others answer at once.
   */
  const slow = (i: number) => ({
    model: {
      provider: "scripted" as const,
      steps: [
        ...Array.from({ length: 5 }, (_, n) => ({
          delayMs: n === 1 || n === 2 ? 1_000 : 0,
          toolCalls: [{ name: "write_file", arguments: { path: `slow-${i}-${n}.txt`, content: `${n}\n` } }],
        })),
        { text: `done ${i}` },
      ],
    },
    tools: ["write_file"],
  });
  const messagesStored = (id: string, n: number) => async () =>
    (await client.getSession(id)).messages.length >= n;

  it("turned on while its run goes on, the stream gets that run's messages from then on, each once, and its end", async () => {
    const { id } = await client.createSession({ agent: slow(1), sessionEvents: false });
    const { runId } = await client.send(id, "go");
    // The first step (its call and its result) committed: the run is in its second model call.
    await waitFor(messagesStored(id, 3), 30_000, "the first step");
    expect(await client.setSessionEvents(id, true)).toEqual({ id, sessionEvents: true });
    // A message queued behind the run: the same job takes it next.
    const second = await client.send(id, "and then");
    const endOf = (run: string) => (e: FleetEvent) =>
      e.type === "RUN_COMPLETED" && (e.data as { runId: string }).runId === run;
    const read = await readSse(`${base}/v1/sessions/${id}/events`, {
      after: "0-0",
      stop: endOf(second.runId),
      timeoutMs: 30_000,
    });
    const stored = (await client.getSession(id)).messages.map((m) => m.seq);
    expect(stored.length).toBeGreaterThan(12);
    expect(messageSeqs(read.events)).toEqual(stored);
    // The steps after the switch were written as they went (their tools' events too), the
    // running run's end, and the queued run whole, from its start.
    expect(read.events.filter((e) => e.type === "TOOL_STARTED").length).toBeGreaterThanOrEqual(3);
    expect(read.events.some(endOf(runId))).toBe(true);
    const types = read.events.map((e) => `${e.type}:${(e.data as { runId?: string }).runId}`);
    expect(types.indexOf(`RUN_STARTED:${second.runId}`)).toBeGreaterThan(
      types.indexOf(`RUN_COMPLETED:${runId}`),
    );
    // Following the queued run as a client does (`?run=`) ends at its end.
    const followed = await readSse(`${base}/v1/sessions/${id}/events?run=${second.runId}`, {
      stop: endOf(second.runId),
      timeoutMs: 10_000,
    });
    expect(followed.events[0]?.type).toBe("RUN_STARTED");
  }, 60_000);

  it("turned off while its run goes on, the run writes nothing more to it (the stream stays gone)", async () => {
    const { id } = await client.createSession({ agent: slow(2) });
    await client.send(id, "go");
    await waitFor(messagesStored(id, 3), 30_000, "the first step");
    expect(await hasStreamKeys(id)).toBe(true);
    expect(await client.setSessionEvents(id, false)).toEqual({ id, sessionEvents: false });
    expect(await isMarkedOff(id)).toBe(true);
    // Two messages queued behind the run: the same job takes them, and writes nothing either.
    await client.send(id, "and then");
    await client.send(id, "and more");
    await waitFor(runsEnded(id, 3), 30_000, "the three runs to end");
    expect(await isMarkedOff(id)).toBe(true);
    // On again: the stream starts over from the first message, with nothing before it.
    await client.setSessionEvents(id, true);
    const stored = (await client.getSession(id)).messages.map((m) => m.seq);
    const read = await readSse(`${base}/v1/sessions/${id}/events`, {
      after: "0-0",
      stop: (_e, all) => messageSeqs(all).length === stored.length,
      timeoutMs: 10_000,
    });
    expect(read.events.map((e) => e.type)).toEqual(stored.map(() => "MESSAGE"));
    expect(messageSeqs(read.events)).toEqual(stored);
  }, 60_000);
});
