import type { FastifyInstance } from "fastify";
import type { Redis } from "ioredis";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { EventStreams } from "../src/producer/event-stream.js";
import { parseAgentConfig } from "../src/shared/agent-config.js";
import { EventWriter } from "../src/shared/event-writer.js";
import { DEFAULT_RETENTION, eventsNotifyChannel } from "../src/shared/events.js";
import { createRedis } from "../src/shared/redis.js";
import { SessionQueries } from "../src/shared/store/session-queries.js";
import { createFleetEnv, type FleetEnv, waitFor } from "./support/fleet-env.js";
import { readSse, serveSessionStreams } from "./support/sse.js";

const AGENT = { model: { provider: "scripted" as const, steps: [{ text: "ok" }] } };

describe("the API's subscription to event notifications", () => {
  let fleet: FleetEnv;
  let writer: EventWriter;
  let channel: string;

  beforeAll(async () => {
    fleet = await createFleetEnv("notify-sub");
    writer = new EventWriter(fleet.redis, fleet.config.prefix);
    channel = eventsNotifyChannel(fleet.config.prefix);
  }, 60_000);
  afterAll(() => fleet?.close());

  const subscribers = async (on = channel) =>
    Number(((await fleet.redis.pubsub("NUMSUB", on)) as [string, number])[1]);
  const park = (id: string, reason: string, by = writer) =>
    by.write(id, [], [{ type: "SESSION_PARKED", reason }]);
  const newSession = async () =>
    (await new SessionQueries(fleet.database).createSession({ agent: parseAgentConfig(AGENT, "agent") })).id;

  it("the real API unsubscribes when its last reader goes, and subscribes again for the next", async () => {
    const { api } = await fleet.startApi();
    const id = await newSession();
    const url = `${api.url}/v1/sessions/${id}/events`;
    const first = readSse(url, { stop: (e) => e.data.reason === "one" });
    await waitFor(async () => (await subscribers()) === 1, 10_000, "the first reader's subscription");
    await park(id, "one");
    expect((await first).events.map((e) => e.data.reason)).toEqual(["one"]);
    await waitFor(async () => (await subscribers()) === 0, 10_000, "no subscription once the reader left");
    const next = readSse(url, { stop: (_e, all) => all.length === 3 });
    await waitFor(async () => (await subscribers()) === 1, 10_000, "the next reader's subscription");
    for (const reason of ["a", "b", "c"]) await park(id, reason);
    expect((await next).events.map((e) => e.data.reason)).toEqual(["a", "b", "c"]);
    await waitFor(async () => (await subscribers()) === 0, 10_000, "no subscription once it left too");
  });

  describe("a reader that arrives while the last one's unsubscribe is in flight", () => {
    let app: FastifyInstance;
    let base: string;
    let opened = 0;
    let gate: () => void = () => {};
    let unsubscribing: Promise<void> = new Promise(() => {});
    let connection: Redis | undefined;
    // A prefix of its own: what the real API of the test above does cannot count here.
    let prefix = "";
    let gatedWriter: EventWriter;
    const gatedSubscribers = () => subscribers(eventsNotifyChannel(prefix));

    beforeAll(async () => {
      prefix = `${fleet.config.prefix}:gated`;
      gatedWriter = new EventWriter(fleet.redis, prefix);
      let started: () => void = () => {};
      unsubscribing = new Promise((resolve) => (started = resolve));
      const held = new Promise<void>((resolve) => (gate = resolve));
      const streams = new EventStreams({
        redis: fleet.redis,
        // The subscriber's first UNSUBSCRIBE waits for the test's gate before it is sent.
        subscriber: () => {
          const redis = createRedis(fleet.config.redisUrl, "producer");
          const unsubscribe = redis.unsubscribe.bind(redis) as (...channels: string[]) => Promise<unknown>;
          let first = true;
          (redis as unknown as { unsubscribe: (...c: string[]) => Promise<unknown> }).unsubscribe = async (
            ...channels
          ) => {
            if (first) {
              first = false;
              started();
              await held;
            }
            return unsubscribe(...channels);
          };
          connection = redis;
          return redis;
        },
        prefix,
        queries: new SessionQueries(fleet.database),
        metrics: { sseClients: { inc: () => void opened++, dec: () => {} } as never },
        maxStreamsPerTenant: 10,
        heartbeatMs: 3_600_000,
        retention: DEFAULT_RETENTION,
        // Never looks again by itself: only a notification brings it the next events.
        pollMs: 3_600_000,
      });
      ({ app, base } = await serveSessionStreams(streams));
    });
    afterAll(async () => {
      gate();
      await app?.close();
      connection?.disconnect();
    });

    it("is subscribed again before it reads, and gets every event by the wake alone", async () => {
      const id = await newSession();
      const first = readSse(`${base}/events/${id}`, { stop: (e) => e.data.reason === "one" });
      // Admitted: its place is taken (the stream's end), and it reads once subscribed.
      await waitFor(() => opened === 1, 10_000, "the first reader to be admitted");
      await waitFor(async () => (await gatedSubscribers()) === 1, 10_000, "the first reader's subscription");
      await park(id, "one", gatedWriter);
      await first;
      // The first reader left: its unsubscribe has started and waits at the gate.
      await unsubscribing;
      const next = readSse(`${base}/events/${id}`, { stop: (_e, all) => all.length === 3 });
      // The next reader was admitted and waits for the subscription: now the unsubscribe goes.
      await waitFor(() => opened === 2, 10_000, "the next reader to be admitted");
      gate();
      await waitFor(async () => (await gatedSubscribers()) === 1, 10_000, "the next reader's subscription");
      for (const reason of ["a", "b", "c"]) await park(id, reason, gatedWriter);
      expect((await next).events.map((e) => e.data.reason)).toEqual(["a", "b", "c"]);
      await waitFor(async () => (await gatedSubscribers()) === 0, 10_000, "no subscription once it left");
    });
  });
});
