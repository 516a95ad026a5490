/**
 * A long-lived session's event stream expires whole after FLEET_EVENTS_MAX_AGE_MS without a
 * write, and the session's next run writes a new one (every stored message first, as any
 * writer does for a stream that lacks them). A reader that comes back with an id of the old
 * stream must get 410 `expired` (contracts §7), not the new stream from its start: that
 * would give it every message it already has a second time.
 */
import { get } from "node:http";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import type { FleetClient } from "../src/producer/client.js";
import { placeExpired, placeMayHaveExpired } from "../src/shared/event-expiry.js";
import { EventWriter } from "../src/shared/event-writer.js";
import { eventStreamKey } from "../src/shared/events.js";
import { createFleetEnv, type FleetEnv, waitFor } from "./support/fleet-env.js";
import { readSse } from "./support/sse.js";

const MAX_AGE_MS = 2_000;

describe("a session's event stream that expired and was written again", () => {
  let fleet: FleetEnv;
  let client: FleetClient;
  let base: string;

  beforeAll(async () => {
    fleet = await createFleetEnv("eventsexpired", { env: { FLEET_EVENTS_MAX_AGE_MS: String(MAX_AGE_MS) } });
    const started = await fleet.startApi();
    client = started.client;
    base = started.api.url;
    await fleet.spawnWorker();
  }, 60_000);
  afterAll(() => fleet?.close());

  const url = (id: string) => `${base}/v1/sessions/${id}/events`;
  const endOf = (runId: string) => (e: { type: string; data: Record<string, unknown> }) =>
    e.type === "RUN_COMPLETED" && e.data.runId === runId;

  it("answers 410 expired for an id of the old stream, and a reader without an id follows the new one", async () => {
    const { id } = await client.createSession({
      agent: {
        model: { provider: "scripted", steps: [{ text: "first answer" }, { text: "next day's answer" }] },
      },
    });
    const first = await client.send(id, "first question");
    const day1 = await readSse(url(id), { stop: endOf(first.runId) });
    expect(day1.events.filter((e) => e.type === "MESSAGE").map((e) => e.data.message.seq)).toEqual([1, 2]);
    const lastSeen = day1.events.at(-1)!.id;

    // Nothing is written for longer than FLEET_EVENTS_MAX_AGE_MS: the stream expires whole.
    const key = eventStreamKey(fleet.config.prefix, id);
    await waitFor(
      async () => (await fleet.redis.exists(key)) === 0,
      MAX_AGE_MS + 5_000,
      "the stream to expire",
    );

    // The next day's message: its run writes a new stream, the stored messages first.
    const second = await client.send(id, "next question");
    await client.waitForRun(second.runId, { timeoutMs: 20_000 });
    await readSse(url(id), { stop: endOf(second.runId) });

    const back = await readSse(url(id), { after: lastSeen, stop: () => true, timeoutMs: 2_000 }).catch(
      (error: Error) => ({ status: 200, error: error.message, events: [] }),
    );
    expect(back.status, JSON.stringify(back)).toBe(410);
    expect(back).toMatchObject({ body: { error: { code: "gone", reason: "expired" } } });

    // `0-0` still reads the stream from its start, and no id still starts at the latest run.
    const fromStart = await readSse(url(id), { after: "0-0", stop: endOf(second.runId) });
    expect(fromStart.events.filter((e) => e.type === "MESSAGE").map((e) => e.data.message.seq)).toEqual([
      1, 2, 3, 4,
    ]);
    const latest = await readSse(url(id), { stop: endOf(second.runId) });
    expect(latest.events[0]).toMatchObject({ type: "RUN_STARTED", data: { runId: second.runId } });
  }, 30_000);

  it("a reader still connected when the stream expires is ended, and its client reads on from the stream written anew, nothing twice", async () => {
    const { id } = await client.createSession({
      agent: {
        model: { provider: "scripted", steps: [{ text: "first answer" }, { text: "next day's answer" }] },
      },
    });
    const first = await client.send(id, "first question");
    const seen: { type: string; seq?: number }[] = [];
    const following = (async () => {
      for await (const event of client.events(id)) {
        seen.push({ type: event.type, seq: event.data.message?.seq });
        if (event.type === "RUN_COMPLETED" && event.data.runId !== first.runId) return "second run ended";
      }
      return "ended";
    })().catch((error: { status?: number; reason?: string }) => `${error.status} ${error.reason}`);
    await waitFor(() => seen.some((e) => e.type === "RUN_COMPLETED"), 20_000, "the first run's end");

    const key = eventStreamKey(fleet.config.prefix, id);
    await waitFor(
      async () => (await fleet.redis.exists(key)) === 0,
      MAX_AGE_MS + 5_000,
      "the stream to expire",
    );
    const second = await client.send(id, "next question");
    await client.waitForRun(second.runId, { timeoutMs: 20_000 });

    // The API ends the reader and answers its reconnect 410; `events()` without `after` then reads
    // the stream again from the latest run (session-follow.ts), as stream() does. Before, it
    // rejected with that 410 ("410 expired").
    expect(await following).toBe("second run ended");
    // Nothing it had was given again: the second run's messages follow the first's once.
    expect(seen.filter((e) => e.type === "MESSAGE").map((e) => e.seq)).toEqual([1, 2, 3, 4]);
  }, 30_000);
});

describe("a reader slower than the session's writes", () => {
  let fleet: FleetEnv;
  let client: FleetClient;
  let base: string;

  beforeAll(async () => {
    fleet = await createFleetEnv("eventsslowreader", { env: { FLEET_EVENTS_MAX: "100" } });
    const started = await fleet.startApi();
    client = started.client;
    base = started.api.url;
  }, 60_000);
  afterAll(() => fleet?.close());

  it("is ended when its place is trimmed while it is connected, and its reconnect gets 410: no silent gap", async () => {
    const { id } = await client.createSession({
      agent: { model: { provider: "scripted", steps: [{ text: "x" }] } },
    });
    const writer = new EventWriter(fleet.redis, fleet.config.prefix, { maxEvents: 100, maxAgeMs: 3_600_000 });
    const big = "x".repeat(64 * 1024);
    const write = async (from: number, to: number) => {
      for (let i = from; i < to; i++)
        await writer.write(id, [], [{ type: "SESSION_PARKED", reason: `r${i} ${big}` }]);
    };
    await write(0, 5);

    // A reader that stops reading after its first bytes: its socket fills, the API waits.
    const seen: { id: string; n: number }[] = [];
    let ended = false;
    let buffer = "";
    let response: import("node:http").IncomingMessage | undefined;
    get(`${base}/v1/sessions/${id}/events?after=0-0`, (res) => {
      response = res;
      res.setEncoding("utf8");
      res.on("data", (chunk: string) => {
        buffer += chunk;
        const blocks = buffer.split("\n\n");
        buffer = blocks.pop() ?? "";
        for (const block of blocks) {
          const eventId = /^id: (.*)$/m.exec(block)?.[1];
          const data = /^data: (.*)$/m.exec(block)?.[1];
          if (eventId && data)
            seen.push({ id: eventId, n: Number(/^r(\d+)/.exec(JSON.parse(data).reason)![1]) });
        }
      });
      res.on("end", () => {
        ended = true;
      });
      res.once("data", () => res.pause());
    });
    await waitFor(() => response !== undefined, 5_000, "the stream to open");
    // The session goes on: far more than FLEET_EVENTS_MAX events while the reader is stuck.
    await write(5, 400);
    response!.resume();
    await waitFor(() => ended || seen.at(-1)?.n === 399, 15_000, "the reader to end or catch up");

    const numbers = seen.map((e) => e.n);
    // What it got has no gap; it was ended where its next events were gone.
    expect(numbers).toEqual(numbers.map((_, i) => i));
    expect(ended).toBe(true);
    const again = await readSse(`${base}/v1/sessions/${id}/events`, {
      after: seen.at(-1)!.id,
      stop: () => true,
    });
    expect(again.status).toBe(410);
  }, 30_000);
});

describe("placeExpired (pure)", () => {
  const intact = { length: 3, entriesAdded: 3, firstId: "1000-0" };
  const trimmed = { length: 3, entriesAdded: 10, firstId: "1000-0" };
  it("no stream: only 0-0 is kept", () => {
    expect(placeExpired(null, "0-0")).toBe(false);
    expect(placeExpired(null, "900-0")).toBe(true);
  });
  it("a stream that lost nothing: its own ids and 0-0 are kept, an id from before it is not", () => {
    expect(placeExpired(intact, "0-0")).toBe(false);
    expect(placeExpired(intact, "1000-0")).toBe(false);
    expect(placeExpired(intact, "1500-2")).toBe(false);
    expect(placeExpired(intact, "999-5")).toBe(true);
  });
  it("a trimmed stream: ids from its first kept entry on", () => {
    expect(placeExpired(trimmed, "0-0")).toBe(true);
    expect(placeExpired(trimmed, "999-0")).toBe(true);
    expect(placeExpired(trimmed, "1000-0")).toBe(false);
    expect(placeExpired({ length: 0, entriesAdded: 4, firstId: null }, "1000-0")).toBe(true);
  });
  it("a place from the first entry on that is not an entry was never this stream's: it is gone", () => {
    // Redis restored from an older snapshot, or a stream dropped after a Postgres restore.
    expect(placeExpired(intact, "1500-2", false)).toBe(true);
    expect(placeExpired(trimmed, "1000-0", false)).toBe(true);
    expect(placeExpired({ length: 0, entriesAdded: 0, firstId: null }, "1000-0", false)).toBe(true);
    expect(placeExpired(intact, "0-0", false)).toBe(false);
  });
  it("an open reader asks only when its place is nearly as old as the retention", () => {
    const day = 24 * 3600 * 1000;
    expect(placeMayHaveExpired("0-0", day, 10 * day)).toBe(false);
    expect(placeMayHaveExpired(`${day}-0`, day, 2 * day - 120_000)).toBe(false);
    expect(placeMayHaveExpired(`${day}-0`, day, 2 * day - 60_000)).toBe(true);
    expect(placeMayHaveExpired("1000-0", 2_000, 1_999)).toBe(false);
    expect(placeMayHaveExpired("1000-0", 2_000, 2_000)).toBe(true);
  });
});
