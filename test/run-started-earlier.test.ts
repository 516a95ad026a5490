/**
 * Where the stream of `?run=` an earlier run starts (EventReader.runStartedId for a run that is
 * not the latest): each RUN_STARTED names the one written before it, so the lookup goes from
 * the latest run's start back over run starts only — not over every event written since, nor
 * over the whole kept stream when the run's start was trimmed away. Counted with INFO
 * commandstats on a Redis of the test's own (commands run inside scripts included): stream
 * reads of at most one entry, one per run started after the one looked for.
 */
import { randomUUID } from "node:crypto";
import { describe, expect, it } from "vitest";
import { EventReader } from "../src/shared/event-reader.js";
import { EventWriter } from "../src/shared/event-writer.js";
import { eventStreamKey, seqKey } from "../src/shared/events.js";
import { commandCalls, ownRedisForFile } from "./support/private-redis.js";
import { deltaEvent, runStartedEvent } from "./support/run-event-inputs.js";

const PREFIX = "earlier";
const started = runStartedEvent;
const delta = deltaEvent;

const own = ownRedisForFile();

/** Writes run `runId`'s start and `deltas` deltas; returns its RUN_STARTED's id. */
async function run(writer: EventWriter, sessionId: string, runId: string, deltas: number): Promise<string> {
  const first = await writer.writeEntries(sessionId, [started(runId)]);
  if (!first.ok) throw new Error("not written");
  // The write does not send the ids back: the RUN_STARTED is the stream's newest entry now.
  const [newest] = await own.redis.xrevrange(eventStreamKey(PREFIX, sessionId), "+", "-", "COUNT", 1);
  for (let i = 0; i < deltas; i += 100)
    await writer.writeEntries(
      sessionId,
      Array.from({ length: Math.min(100, deltas - i) }, (_, n) => delta(runId, i + n)),
    );
  return newest![0];
}

/** `runStartedId`'s answer, and the stream reads it made (XRANGE, XREVRANGE calls). */
async function lookup(reader: EventReader, sessionId: string, runId: string) {
  await own.redis.config("RESETSTAT");
  const id = await reader.runStartedId(sessionId, runId);
  const calls = await commandCalls(own.redis);
  return { id, xrange: calls.xrange ?? 0, xrevrange: calls.xrevrange ?? 0 };
}

describe("an earlier run's RUN_STARTED", () => {
  it("is found over the run starts after it, not every event after it, and found gone as soon", async () => {
    const writer = new EventWriter(own.redis, PREFIX);
    const reader = new EventReader(own.redis, PREFIX);
    const sessionId = randomUUID();
    const [a, b] = [randomUUID(), randomUUID()];
    const later = Array.from({ length: 20 }, () => randomUUID());
    const aId = await run(writer, sessionId, a, 1);
    await run(writer, sessionId, b, 1_500);
    const laterIds: string[] = [];
    for (const r of later) laterIds.push(await run(writer, sessionId, r, 2));

    // 21 runs started after it: one read of one entry each, and its own. Before: the 1,560
    // events after it, read back from the end in pages of 100 (16 XREVRANGEs).
    expect(await lookup(reader, sessionId, a)).toEqual({ id: aId, xrange: 22, xrevrange: 0 });
    expect(await lookup(reader, sessionId, later[4]!)).toEqual({ id: laterIds[4], xrange: 16, xrevrange: 0 });
    // The latest: one read, as before.
    expect(await lookup(reader, sessionId, later[19]!)).toEqual({
      id: laterIds[19],
      xrange: 1,
      xrevrange: 0,
    });

    // Trimmed (the stream keeps its last 1,000 events): a's and b's starts are gone. Before:
    // the whole kept stream read back (10 XREVRANGEs of 100).
    await own.redis.xtrim(eventStreamKey(PREFIX, sessionId), "MAXLEN", 1_000);
    expect(await lookup(reader, sessionId, a)).toEqual({ id: null, xrange: 21, xrevrange: 0 });
    expect(await lookup(reader, sessionId, b)).toEqual({ id: null, xrange: 21, xrevrange: 0 });
    expect(await lookup(reader, sessionId, later[0]!)).toEqual({ id: laterIds[0], xrange: 20, xrevrange: 0 });
    // A run that never started here: no more.
    expect((await lookup(reader, sessionId, randomUUID())).xrange).toBe(21);
  });

  it("is still found past run starts an earlier release wrote (no link), by reading back from there", async () => {
    const writer = new EventWriter(own.redis, PREFIX);
    const reader = new EventReader(own.redis, PREFIX);
    const sessionId = randomUUID();
    const key = eventStreamKey(PREFIX, sessionId);
    const [older, old, latest] = [randomUUID(), randomUUID(), randomUUID()];
    // An earlier release's worker: its entries have no link, and it notes its run as `started`.
    const oldStart = async (runId: string) => {
      const id = (await own.redis.xadd(
        key,
        "*",
        "type",
        "RUN_STARTED",
        "data",
        JSON.stringify({ sessionId, ...started(runId) }),
      ))!;
      await own.redis.xadd(
        key,
        "*",
        "type",
        "MESSAGE_DELTA",
        "data",
        JSON.stringify({ sessionId, ...delta(runId, 0) }),
      );
      await own.redis.hset(seqKey(PREFIX, sessionId), "started", `${runId} ${id}`);
      return id;
    };
    const olderId = await oldStart(older);
    const oldId = await oldStart(old);
    const latestId = await run(writer, sessionId, latest, 3);

    expect((await lookup(reader, sessionId, latest)).id).toBe(latestId);
    expect((await lookup(reader, sessionId, old)).id).toBe(oldId);
    expect((await lookup(reader, sessionId, older)).id).toBe(olderId);
    expect((await lookup(reader, sessionId, randomUUID())).id).toBeNull();
  });
});
