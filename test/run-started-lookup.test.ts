/**
 * Where a session's stream starts for a reader without an id (contracts §7: the RUN_STARTED of
 * the latest run): found by its id, kept beside the stream when it is written, not by reading
 * the stream back from its end. A long run whose RUN_STARTED was trimmed made every such
 * reader read the whole kept stream (10,000 events by default) to find it was not there.
 * Counted in entries Redis answered, not in time.
 */
import { randomUUID } from "node:crypto";
import type { Redis } from "ioredis";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { EventReader } from "../src/shared/event-reader.js";
import { EventWriter } from "../src/shared/event-writer.js";
import { eventStreamKey } from "../src/shared/events.js";
import { createFleetEnv, type FleetEnv } from "./support/fleet-env.js";
import { deltaEvent, runStartedEvent } from "./support/run-event-inputs.js";

let fleet: FleetEnv;
beforeAll(async () => {
  fleet = await createFleetEnv("run-started-lookup");
}, 60_000);
afterAll(() => fleet?.close());

/** A reader whose stream reads are counted: the entries Redis answered. */
function countingReader(redis: Redis, prefix: string) {
  const counted = { entries: 0 };
  const proxy = new Proxy(redis, {
    get(target, name, receiver) {
      const value = Reflect.get(target, name, receiver);
      if (name !== "xrange" && name !== "xrevrange")
        return typeof value === "function" ? value.bind(target) : value;
      return async (...args: unknown[]) => {
        const rows = (await (value as (...a: unknown[]) => Promise<unknown[]>).apply(
          target,
          args,
        )) as unknown[];
        counted.entries += rows.length;
        return rows;
      };
    },
  });
  return { reader: new EventReader(proxy, prefix), counted };
}

const started = runStartedEvent;
const delta = deltaEvent;

describe("a run's RUN_STARTED", () => {
  it("is found without reading the stream back, and found gone as soon", async () => {
    const writer = new EventWriter(fleet.redis, fleet.config.prefix);
    const sessionId = randomUUID();
    const [earlier, latest] = [randomUUID(), randomUUID()];
    const key = eventStreamKey(fleet.config.prefix, sessionId);
    await writer.writeEntries(sessionId, [started(earlier), delta(earlier, 0)]);
    await writer.writeEntries(sessionId, [started(latest)]);
    // The write does not send the ids back: the RUN_STARTED is the stream's newest entry now.
    const latestId = (await fleet.redis.xrevrange(key, "+", "-", "COUNT", 1))[0]?.[0];
    for (let i = 0; i < 30; i++)
      await writer.writeEntries(
        sessionId,
        Array.from({ length: 100 }, (_, n) => delta(latest, i * 100 + n)),
      );
    const { reader, counted } = countingReader(fleet.redis, fleet.config.prefix);
    expect(await reader.runStartedId(sessionId, latest)).toBe(latestId);
    // Before: the 3,000 deltas after it, read back from the end.
    expect(counted.entries).toBeLessThan(10);

    // Trimmed (a long run: the stream keeps its last events): not found, without reading the rest.
    await fleet.redis.xtrim(key, "MAXLEN", 1_000);
    counted.entries = 0;
    expect(await reader.runStartedId(sessionId, latest)).toBeNull();
    // Before: the whole kept stream (1,000 entries).
    expect(counted.entries).toBeLessThan(10);
  });

  it("is still found by reading back when the stream holds no note of it (written by an earlier release)", async () => {
    const sessionId = randomUUID();
    const runId = randomUUID();
    const key = eventStreamKey(fleet.config.prefix, sessionId);
    const id = await fleet.redis.xadd(
      key,
      "*",
      "type",
      "RUN_STARTED",
      "data",
      JSON.stringify({ sessionId, ...started(runId) }),
    );
    await fleet.redis.xadd(
      key,
      "*",
      "type",
      "MESSAGE_DELTA",
      "data",
      JSON.stringify({ sessionId, ...delta(runId, 1) }),
    );
    const { reader } = countingReader(fleet.redis, fleet.config.prefix);
    expect(await reader.runStartedId(sessionId, runId)).toBe(id);
    expect(await reader.runStartedId(sessionId, randomUUID())).toBeNull();
  });
});
