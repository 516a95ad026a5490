/**
 * Session event streams are bounded by bytes too (FLEET_EVENTS_MAX_BYTES), not only by count
 * and age: a session whose messages are big (tool results up to 1,000,000 characters) held
 * up to FLEET_EVENTS_MAX of them in Redis. Measured with MEMORY USAGE on the real Redis. A
 * reader whose next events the byte bound removed is ended and its reconnect gets 410 (the
 * count bound's rule, contracts §7); a caught-up reader whose own place alone went is not.
 * MESSAGE events stay exactly the stored ones: the seq check still skips a repeat and refuses a gap.
 */
import { get, type IncomingMessage } from "node:http";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import type { FleetClient } from "../src/producer/client.js";
import { trimmedPast } from "../src/shared/event-expiry.js";
import { EventWriter } from "../src/shared/event-writer.js";
import { eventStreamKey, seqKey, toStored } from "../src/shared/events.js";
import type { StoredMessage } from "../src/shared/messages.js";
import { createFleetEnv, type FleetEnv, waitFor } from "./support/fleet-env.js";
import { bigToolResult } from "./support/histories.js";
import { readSse } from "./support/sse.js";

const MB = 1024 * 1024;

describe("a session with big messages", () => {
  let fleet: FleetEnv;
  beforeAll(async () => {
    fleet = await createFleetEnv("eventsbytes");
  }, 60_000);
  afterAll(() => fleet?.close());

  async function writeMessages(sessionId: string, writer: EventWriter, count: number) {
    for (let seq = 1; seq <= count; seq++) {
      const result = await writer.write(
        sessionId,
        [{ runId: "r1", message: bigToolResult(seq, 1_000_000) }],
        [],
      );
      expect(result.ok).toBe(true);
    }
  }
  const usage = async (key: string) => Number(await fleet.redis.call("MEMORY", "USAGE", key, "SAMPLES", "0"));
  const usedMemory = async () => Number(/^used_memory:(\d+)/m.exec(await fleet.redis.info("memory"))![1]);

  it("holds at most FLEET_EVENTS_MAX_BYTES (and its newest event) in Redis, its MESSAGE events contiguous up to the last", async () => {
    const prefix = fleet.config.prefix;
    const count = 30;
    // Before: count and age only (no byte bound), as every stream was.
    const unbounded = new EventWriter(fleet.redis, prefix, { maxEvents: 10_000, maxAgeMs: 3_600_000 });
    const memoryBefore = await usedMemory();
    await writeMessages("unbounded", unbounded, count);
    const unboundedBytes = await usage(eventStreamKey(prefix, "unbounded"));
    const memoryUnbounded = await usedMemory();
    await fleet.redis.del(eventStreamKey(prefix, "unbounded"), seqKey(prefix, "unbounded"));

    const maxBytes = 4 * MB;
    const bounded = new EventWriter(fleet.redis, prefix, {
      maxEvents: 10_000,
      maxAgeMs: 3_600_000,
      maxBytes,
    });
    const memoryBefore2 = await usedMemory();
    await writeMessages("bounded", bounded, count);
    const boundedBytes = await usage(eventStreamKey(prefix, "bounded"));
    const memoryBounded = await usedMemory();
    console.log(
      `${count} tool results of 1,000,000 characters: MEMORY USAGE of the stream ${(unboundedBytes / MB).toFixed(1)} MB ` +
        `unbounded, ${(boundedBytes / MB).toFixed(1)} MB with FLEET_EVENTS_MAX_BYTES=${maxBytes / MB} MB; ` +
        `used_memory grew ${((memoryUnbounded - memoryBefore) / MB).toFixed(1)} MB, then ${((memoryBounded - memoryBefore2) / MB).toFixed(1)} MB (shared Redis: other tests write too)`,
    );
    expect(unboundedBytes).toBeGreaterThan(count * 1_000_000);
    // What it holds of events, plus the newest one (always kept), plus the stream's own overhead.
    expect(boundedBytes).toBeLessThan(maxBytes + 1.1 * MB);

    const rows = (await fleet.redis.xrange(eventStreamKey(prefix, "bounded"), "-", "+")) as [
      string,
      string[],
    ][];
    const seqs = rows.map(toStored).map((e) => (e.data.message as StoredMessage).seq);
    console.log(`kept ${seqs.length} MESSAGE events: seq ${seqs[0]}…${seqs.at(-1)}`);
    expect(seqs.length).toBeGreaterThanOrEqual(3);
    expect(seqs).toEqual(seqs.map((_, i) => count - seqs.length + 1 + i));
    // The seq check is untouched by the trimming: a repeat is skipped, the next seq goes on, a gap is refused.
    expect(await bounded.lastSeq("bounded")).toBe(count);
    const again = await bounded.write(
      "bounded",
      [{ runId: "r1", message: bigToolResult(count, 1_000_000) }],
      [],
    );
    expect(again).toMatchObject({ ok: true, written: 0 });
    const gap = await bounded.write("bounded", [{ runId: "r1", message: bigToolResult(count + 2, 10) }], []);
    expect(gap).toMatchObject({ ok: false, last: count });
    const next = await bounded.write("bounded", [{ runId: "r1", message: bigToolResult(count + 1, 10) }], []);
    expect(next.ok && next.written).toBe(1);
  }, 60_000);
});

describe("many small events past the byte bound", () => {
  let fleet: FleetEnv;
  beforeAll(async () => {
    fleet = await createFleetEnv("eventsbytessmall");
  }, 60_000);
  afterAll(() => fleet?.close());

  it("a replay of 2,000 messages of 1 KB keeps the newest that fit in the bound, exactly, contiguous by seq", async () => {
    const maxBytes = 256 * 1024;
    const writer = new EventWriter(fleet.redis, fleet.config.prefix, {
      maxEvents: 10_000,
      maxAgeMs: 3_600_000,
      maxBytes,
    });
    const messages = Array.from({ length: 2_000 }, (_, i) => ({
      runId: "r1",
      message: bigToolResult(i + 1, 1_000),
    }));
    // One write: chunks of 128 KB (WRITE_CHUNK), each trimming the ~128 oldest over several pages.
    expect((await writer.write("replayed", messages, [])).ok).toBe(true);
    const rows = (await fleet.redis.xrange(eventStreamKey(fleet.config.prefix, "replayed"), "-", "+")) as [
      string,
      string[],
    ][];
    const held = rows.reduce(
      (sum, [, fields]) => sum + Buffer.byteLength(fields[1]!) + Buffer.byteLength(fields[3]!),
      0,
    );
    const seqs = rows.map(toStored).map((e) => (e.data.message as StoredMessage).seq);
    console.log(
      `kept ${rows.length} of 2,000 events, ${held} bytes of type and data (bound ${maxBytes}): seq ${seqs[0]}…${seqs.at(-1)}`,
    );
    expect(held).toBeLessThanOrEqual(maxBytes);
    // Trimmed no more than needed: one more event would not have fit.
    expect(held + Buffer.byteLength(rows[0]![1][3]!) + 7).toBeGreaterThan(maxBytes);
    expect(seqs).toEqual(seqs.map((_, i) => 2_000 - seqs.length + 1 + i));
  }, 60_000);
});

describe("readers of a stream the byte bound trims", () => {
  let fleet: FleetEnv;
  let client: FleetClient;
  let base: string;
  const maxBytes = MB;

  beforeAll(async () => {
    fleet = await createFleetEnv("eventsbytesreader");
    const started = await fleet.startApi();
    client = started.client;
    base = started.api.url;
  }, 60_000);
  afterAll(() => fleet?.close());

  const newSession = async () =>
    (await client.createSession({ agent: { model: { provider: "scripted", steps: [{ text: "x" }] } } })).id;
  const writer = () =>
    new EventWriter(fleet.redis, fleet.config.prefix, { maxEvents: 10_000, maxAgeMs: 3_600_000, maxBytes });
  const numberOf = (reason: unknown) => Number(/^r(\d+)/.exec(String(reason))![1]);

  it("a reader behind by more than FLEET_EVENTS_MAX_BYTES (far fewer events than a page) is ended, and its reconnect gets 410: no silent gap", async () => {
    const id = await newSession();
    const events = writer();
    const big = "x".repeat(256 * 1024);
    const write = async (from: number, to: number) => {
      for (let i = from; i < to; i++)
        await events.write(id, [], [{ type: "SESSION_PARKED", reason: `r${i} ${big}` }]);
    };
    await write(0, 2);
    // A reader that stops reading after its first bytes: its socket fills, the API waits.
    const seen: { id: string; n: number }[] = [];
    let ended = false;
    let buffer = "";
    let response: IncomingMessage | undefined;
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
          if (eventId && data) seen.push({ id: eventId, n: numberOf(JSON.parse(data).reason) });
        }
      });
      res.on("end", () => {
        ended = true;
      });
      res.once("data", () => res.pause());
    });
    await waitFor(() => response !== undefined, 5_000, "the stream to open");
    // 20 events of 256 KB: 5 MB, five times the bound, and far fewer than a page (200).
    await write(2, 22);
    const kept = await fleet.redis.xlen(eventStreamKey(fleet.config.prefix, id));
    response!.resume();
    await waitFor(() => ended || seen.at(-1)?.n === 21, 15_000, "the reader to end or catch up");
    const numbers = seen.map((e) => e.n);
    console.log(`stream keeps ${kept} of 22 events; the reader got ${numbers.join(",")}; ended: ${ended}`);
    expect(numbers).toEqual(numbers.map((_, i) => i));
    expect(ended).toBe(true);
    const goneCount = async () => {
      const text = await (await fetch(`${base}/metrics`)).text();
      return Number(/^fleet_event_places_gone_total\{stream="session"[^}]*\} (\S+)$/m.exec(text)?.[1]);
    };
    const goneBefore = await goneCount();
    // A first read after the trimming (the API read nothing before the writes) ends the reader
    // with nothing sent: its place is then the stream's start (events-first-read.test.ts).
    const again = await readSse(`${base}/v1/sessions/${id}/events`, {
      after: seen.at(-1)?.id ?? "0-0",
      stop: () => true,
    });
    expect(again.status).toBe(410);
    // What an operator sees: the 410 counted (readers too slow for the byte bound).
    expect(await goneCount()).toBe(goneBefore + 1);
  }, 30_000);

  it("a caught-up reader whose place alone was trimmed (for one event bigger than the bound) reads on", async () => {
    const id = await newSession();
    const events = writer();
    for (let i = 0; i < 3; i++) await events.write(id, [], [{ type: "SESSION_PARKED", reason: `r${i}` }]);
    const got: number[] = [];
    const reading = readSse(`${base}/v1/sessions/${id}/events`, {
      after: "0-0",
      stop: (event) => {
        got.push(numberOf(event.data.reason));
        return got.at(-1) === 4;
      },
    });
    await waitFor(() => got.at(-1) === 2, 5_000, "the reader to catch up");
    // Bigger than the bound: every earlier event goes, the reader's place with them.
    await events.write(id, [], [{ type: "SESSION_PARKED", reason: `r3 ${"y".repeat(1.5 * MB)}` }]);
    await waitFor(() => got.at(-1) === 3, 5_000, "the big event");
    const afterBig = await fleet.redis.xlen(eventStreamKey(fleet.config.prefix, id));
    await events.write(id, [], [{ type: "SESSION_PARKED", reason: "r4" }]);
    const read = await reading;
    console.log(
      `after the big event the stream kept ${afterBig} entr${afterBig === 1 ? "y" : "ies"}; the reader got ${got.join(",")}`,
    );
    expect(afterBig).toBe(1);
    expect(read.status).toBe(200);
    expect(got).toEqual([0, 1, 2, 3, 4]);
  }, 30_000);
});

describe("trimmedPast (pure)", () => {
  const stream = (maxDeletedId: string | null | undefined) => ({
    length: 3,
    entriesAdded: 10,
    firstId: "1000-0",
    maxDeletedId,
  });
  it("a place the byte bound removed entries after is gone; one removed alone, or by count or age, is not", () => {
    expect(trimmedPast(stream("999-0"), "998-0")).toBe(true);
    expect(trimmedPast(stream("999-0"), "999-0")).toBe(false);
    expect(trimmedPast(stream("0-0"), "998-0")).toBe(false);
  });
  it("not known (Redis before 7): gone; no stream: not", () => {
    expect(trimmedPast(stream(null), "998-0")).toBe(true);
    expect(trimmedPast(stream(undefined), "998-0")).toBe(true);
    expect(trimmedPast(null, "998-0")).toBe(false);
  });
});
