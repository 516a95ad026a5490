import type { FastifyInstance } from "fastify";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { EventStreams } from "../src/producer/event-stream.js";
import { EventWriter } from "../src/shared/event-writer.js";
import { eventStreamKey } from "../src/shared/events.js";
import { createRedis } from "../src/shared/redis.js";
import { createFleetEnv, type FleetEnv } from "./support/fleet-env.js";
import { readSse, serveSessionStreams } from "./support/sse.js";

const MAX_BYTES = 1024 * 1024;
const BIG = "x".repeat(256 * 1024);

describe("a session stream's first read after its place was trimmed", () => {
  let fleet: FleetEnv;
  let app: FastifyInstance;
  let base: string;
  let prefix: string;
  let writer: EventWriter;
  /** The runs `lastRun` answers from (the latest last). */
  let runs: { id: string; status: string }[] = [];
  /** Resolves when a reader has opened and waits before its first read; `release` lets it read. */
  let opened: Promise<void> = Promise.resolve();
  let release: () => void = () => {};

  const hold = () => {
    let reached: () => void = () => {};
    opened = new Promise((resolve) => (reached = resolve));
    const gate = new Promise<void>((resolve) => (release = resolve));
    return async () => {
      reached();
      await gate;
    };
  };
  let waitBeforeRead: () => Promise<void> = async () => {};

  beforeAll(async () => {
    fleet = await createFleetEnv("events-first-read");
    prefix = fleet.config.prefix;
    writer = new EventWriter(fleet.redis, prefix, {
      maxEvents: 10_000,
      maxAgeMs: 3_600_000,
      maxBytes: MAX_BYTES,
    });
    const streams = new EventStreams({
      redis: fleet.redis,
      subscriber: () => createRedis(fleet.config.redisUrl, "producer"),
      prefix,
      queries: {
        getSession: async () => ({ sessionEvents: true }) as never,
        lastRun: async (_session, _tenant, only = {}) =>
          runs
            .filter((r) => (only.id ?? r.id) === r.id && (only.status ?? r.status) === r.status)
            .at(-1) as never,
      },
      metrics: { sseClients: { inc: () => {}, dec: () => {} } as never },
      maxStreamsPerTenant: 10,
      heartbeatMs: 3_600_000,
      retention: { maxEvents: 10_000, maxAgeMs: 3_600_000, maxBytes: MAX_BYTES },
      pollMs: 50,
      // Called as the stream opens, before its first read (and at heartbeats: never here).
      repairRunEnd: () => waitBeforeRead(),
    });
    ({ app, base } = await serveSessionStreams(streams));
  }, 60_000);
  afterAll(async () => {
    release();
    await app?.close();
    await fleet?.close();
  });

  let n = 0;
  const newSession = () => `s-${++n}`;
  const park = async (id: string, from: number, to: number, size = BIG) => {
    for (let i = from; i < to; i++)
      await writer.write(id, [], [{ type: "SESSION_PARKED", reason: `r${i} ${size}` }]);
  };
  const reasons = (events: { type: string; data: Record<string, unknown> }[]) =>
    events.map((e) => (e.type === "SESSION_PARKED" ? String(e.data.reason).split(" ")[0] : e.type));
  /** Opens a reader held before its first read; `during` runs while it is held. */
  const readHeld = async (
    url: string,
    during: () => Promise<void>,
    stop: (all: unknown[]) => boolean = () => false,
    after?: string,
  ) => {
    waitBeforeRead = hold();
    const reading = readSse(url, { after, stop: (_e, all) => stop(all) });
    await opened;
    await during();
    waitBeforeRead = async () => {};
    release();
    return reading;
  };
  /** Stops at the event `reason` (the last written), so that a reader handed a gap shows it. */
  const last = (reason: string) => (all: unknown[]) => reasons(all as never).at(-1) === reason;
  const kept = (id: string) => fleet.redis.xlen(eventStreamKey(prefix, id));

  it("from 0-0: ended with nothing sent, and its reconnect gets 410", async () => {
    const id = newSession();
    await park(id, 0, 2);
    const read = await readHeld(`${base}/events/${id}`, () => park(id, 2, 10), last("r9"), "0-0");
    expect(await kept(id)).toBeLessThan(10);
    expect(read.status).toBe(200);
    expect(reasons(read.events)).toEqual([]);
    expect((await readSse(`${base}/events/${id}`, { after: "0-0", stop: () => true })).status).toBe(410);
  });

  it("from 0-0 with nothing trimmed meanwhile: every event", async () => {
    const id = newSession();
    await park(id, 0, 2, "small");
    const read = await readHeld(
      `${base}/events/${id}`,
      () => park(id, 2, 4, "small"),
      (all) => all.length === 4,
      "0-0",
    );
    expect(reasons(read.events)).toEqual(["r0", "r1", "r2", "r3"]);
  });

  it("without an id, from the latest run's RUN_STARTED: ended with nothing sent", async () => {
    const id = newSession();
    runs = [{ id: `${id}-run`, status: "running" }];
    await writer.write(
      id,
      [],
      [{ type: "RUN_STARTED", runId: `${id}-run`, kind: "run", resumeKind: null, trigger: "api" }],
    );
    await park(id, 0, 1);
    const read = await readHeld(`${base}/events/${id}`, () => park(id, 1, 9), last("r8"));
    expect(await kept(id)).toBeLessThan(10);
    expect(reasons(read.events)).toEqual([]);
  });

  it("without an id, from the latest run's RUN_STARTED, nothing trimmed: RUN_STARTED first, then the rest", async () => {
    const id = newSession();
    runs = [{ id: `${id}-run`, status: "running" }];
    await park(id, 0, 1, "small");
    await writer.write(
      id,
      [],
      [{ type: "RUN_STARTED", runId: `${id}-run`, kind: "run", resumeKind: null, trigger: "api" }],
    );
    await park(id, 1, 2, "small");
    const read = await readHeld(
      `${base}/events/${id}`,
      () => park(id, 2, 3, "small"),
      (all) => all.length === 3,
    );
    expect(reasons(read.events)).toEqual(["RUN_STARTED", "r1", "r2"]);
  });

  it("without an id or a run, from the stream's newest entry: ended when entries after it were trimmed", async () => {
    const id = newSession();
    runs = [];
    await park(id, 0, 1);
    const read = await readHeld(`${base}/events/${id}`, () => park(id, 1, 9), last("r8"));
    expect(await kept(id)).toBeLessThan(9);
    expect(reasons(read.events)).toEqual([]);
  });

  it("without an id or a run, nothing trimmed: what came after the newest entry", async () => {
    const id = newSession();
    runs = [];
    await park(id, 0, 1, "small");
    const read = await readHeld(
      `${base}/events/${id}`,
      () => park(id, 1, 3, "small"),
      (all) => all.length === 2,
    );
    expect(reasons(read.events)).toEqual(["r1", "r2"]);
  });
});
