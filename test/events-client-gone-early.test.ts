/**
 * A reader whose connection is gone before its stream opens — it gave up while the API read
 * its session (Postgres slow), or while the API subscribed — frees everything it took. The
 * stream's "close" listener was added only after that work: a response already closed never
 * said so again, and the stream served nobody for ever, one Redis read a second, holding its
 * tenant's slot (after FLEET_SSE_MAX_STREAMS_PER_TENANT of them every reader of the tenant
 * got 429 until the API restarted) and the notification subscription. A FIN that came in
 * that time was missed too, where one after the stream opened ends it (half-closed-client.test.ts).
 */
import { connect, type Socket } from "node:net";
import type { FastifyInstance } from "fastify";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { EventStreams } from "../src/producer/event-stream.js";
import { answerHalfClosedClients } from "../src/shared/http-server.js";
import { createRedis } from "../src/shared/redis.js";
import { createFleetEnv, type FleetEnv, waitFor } from "./support/fleet-env.js";
import { serveSessionStreams } from "./support/sse.js";

describe("an event stream whose client went away before it opened", () => {
  let fleet: FleetEnv;
  let app: FastifyInstance;
  let base: string;
  let streams: EventStreams;
  /** Streams counted open (fleet_sse_clients). */
  let open = 0;
  /** Server-side sockets closed, and ended by their client's FIN, so far. */
  let serverClosed = 0;
  let serverEnded = 0;
  /** The next getSession waits for this gate; `reached` resolves when it is waiting. */
  let reached: Promise<void> = Promise.resolve();
  let gate: Promise<void> = Promise.resolve();
  let release: () => void = () => {};
  const hold = () => {
    let arrived: () => void = () => {};
    reached = new Promise((resolve) => (arrived = resolve));
    gate = new Promise((resolve) => (release = resolve));
    return arrived;
  };
  let arrived: () => void = () => {};

  beforeAll(async () => {
    fleet = await createFleetEnv("events-gone-early");
    streams = new EventStreams({
      redis: fleet.redis,
      subscriber: () => createRedis(fleet.config.redisUrl, "producer"),
      prefix: fleet.config.prefix,
      queries: {
        getSession: async () => {
          arrived();
          await gate;
          return { sessionEvents: true } as never;
        },
        lastRun: async () => undefined,
      },
      metrics: { sseClients: { inc: () => open++, dec: () => open-- } as never },
      maxStreamsPerTenant: 3,
      heartbeatMs: 3_600_000,
      retention: { maxEvents: 10_000, maxAgeMs: 3_600_000, maxBytes: 1024 * 1024 },
      pollMs: 50,
    });
    ({ app, base } = await serveSessionStreams(streams));
    // As the API's server does (http-api.ts): a FIN leaves the server's side open.
    answerHalfClosedClients(app.server);
    app.server.on("connection", (socket: Socket) => {
      socket.on("close", () => serverClosed++);
      socket.on("end", () => serverEnded++);
    });
  }, 60_000);
  afterAll(async () => {
    release();
    await app?.close();
    await fleet?.close();
  });

  /** Opens a stream, drops the connection (`how`) while its session is read, then lets the read end. */
  const goneEarly = async (how: "end" | "reset") => {
    arrived = hold();
    const { hostname, port } = new URL(base);
    const socket = connect({ host: hostname, port: Number(port) });
    socket.on("error", () => {});
    socket.write(`GET /events/s-${how} HTTP/1.1\r\nHost: fleet\r\n\r\n`);
    await reached;
    const [closedBefore, endedBefore] = [serverClosed, serverEnded];
    if (how === "reset") socket.resetAndDestroy();
    else socket.end();
    await waitFor(
      async () => (how === "reset" ? serverClosed > closedBefore : serverEnded > endedBefore),
      10_000,
      "the server saw it",
    );
    release();
    return socket;
  };

  it("frees its slot when the connection was reset", async () => {
    for (let i = 0; i < 3; i++) await goneEarly("reset");
    await waitFor(async () => open === 0, 10_000, `every stream ended (${open} of 3 left open)`);
    expect(open).toBe(0);
  });

  it("ends at a FIN sent before it opened, as at one sent after", async () => {
    const sockets: Socket[] = [];
    for (let i = 0; i < 3; i++) sockets.push(await goneEarly("end"));
    await waitFor(async () => open === 0, 10_000, `every stream ended (${open} of 3 left open)`);
    expect(open).toBe(0);
    for (const socket of sockets) socket.destroy();
  });
});
