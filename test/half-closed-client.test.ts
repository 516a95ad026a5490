/**
 * A client that half-closes its connection after its request (`printf 'GET …' | nc -q0`,
 * `shutdown(SHUT_WR)`) still gets its answer. Node's HTTP server ended such a connection at
 * the client's FIN (`server.httpAllowHalfOpen` false), so every route that answers after an
 * await — a Postgres read, the key check — wrote into a closed socket: the client got
 * nothing. A half-close does not mean the client lost interest in the answer
 * (httpwg/http-core#22 and #431, for RFC 9112). An event stream
 * still ends at the client's FIN, so a reader that went away frees its slot at once.
 */
import { connect, type Socket } from "node:net";
import { Gauge, Registry } from "prom-client";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { startMetricsServer } from "../src/shared/http-server.js";
import { ApiKeys } from "../src/shared/store/api-keys.js";
import { createFleetEnv, type FleetEnv, waitFor } from "./support/fleet-env.js";
import { sseClients } from "./support/sse.js";

const AGENT = { model: { provider: "scripted" as const, steps: [{ text: "ok" }] } };

/** Sends `request`, half-closes, and returns all the server sent until it closed. */
function halfClosed(base: string, request: string): Promise<string> {
  const { hostname, port } = new URL(base);
  return new Promise((resolve, reject) => {
    const chunks: Buffer[] = [];
    const socket = connect({ host: hostname, port: Number(port), allowHalfOpen: true }, () => {
      socket.end(request);
    });
    socket.on("data", (chunk: Buffer) => chunks.push(chunk));
    socket.on("error", reject);
    socket.on("close", () => resolve(Buffer.concat(chunks).toString("utf8")));
  });
}

describe("a client that half-closes after its request", () => {
  let fleet: FleetEnv;
  let base: string;
  let key: string;

  beforeAll(async () => {
    fleet = await createFleetEnv("halfclosed");
    key = (await new ApiKeys(fleet.database).create("acme")).key;
    base = (await fleet.startApi()).api.url;
  }, 60_000);
  afterAll(() => fleet?.close());

  it("gets the answer of a route that reads Postgres, and of /healthz", async () => {
    const created = await fetch(`${base}/v1/sessions`, {
      method: "POST",
      headers: { authorization: `Bearer ${key}`, "content-type": "application/json" },
      body: JSON.stringify({ agent: AGENT }),
    });
    const { id } = (await created.json()) as { id: string };
    const answer = await halfClosed(
      base,
      `GET /v1/sessions/${id} HTTP/1.1\r\nHost: fleet\r\nAuthorization: Bearer ${key}\r\n\r\n`,
    );
    expect(answer).toMatch(/^HTTP\/1\.1 200 OK\r\n/);
    expect(answer).toContain(`"id":"${id}"`);
    const health = await halfClosed(base, "GET /healthz HTTP/1.1\r\nHost: fleet\r\n\r\n");
    expect(health).toMatch(/^HTTP\/1\.1 200 OK\r\n/);
    // Two requests sent at once, then the FIN: both answered, in order, then the connection closes.
    const two = await halfClosed(
      base,
      `GET /v1/sessions/${id} HTTP/1.1\r\nHost: fleet\r\nAuthorization: Bearer ${key}\r\n\r\n`.repeat(2),
    );
    expect(two.match(/HTTP\/1\.1 200 OK\r\n/g)).toHaveLength(2);
  }, 60_000);

  it("ends an event stream at the client's FIN: its slot is free at once", async () => {
    const created = await fetch(`${base}/v1/sessions`, {
      method: "POST",
      headers: { authorization: `Bearer ${key}`, "content-type": "application/json" },
      body: JSON.stringify({ agent: AGENT }),
    });
    const { id } = (await created.json()) as { id: string };
    const { hostname, port } = new URL(base);
    const socket: Socket = connect({ host: hostname, port: Number(port), allowHalfOpen: true });
    const closed = new Promise<void>((resolve) => socket.on("close", () => resolve()));
    let received = "";
    socket.on("data", (chunk: Buffer) => {
      received += chunk.toString("utf8");
    });
    socket.write(
      `GET /v1/sessions/${id}/events HTTP/1.1\r\nHost: fleet\r\nAuthorization: Bearer ${key}\r\n\r\n`,
    );
    await waitFor(
      async () => received.includes(": events") && (await sseClients(base)) === 1,
      10_000,
      "the stream served",
    );
    expect(received).toMatch(/^HTTP\/1\.1 200 OK\r\n/);
    socket.end();
    await waitFor(async () => (await sseClients(base)) === 0, 10_000, "the stream ended at the FIN");
    await closed;
  }, 60_000);
});

describe("a probe that half-closes, against a worker's or the sweeper's metrics port", () => {
  it("gets /metrics and /healthz", async () => {
    // Answers that take a moment, as Postgres and Redis do: an answer ready in the same turn
    // went out before Node looked at the FIN.
    const later = () => new Promise<void>((resolve) => setTimeout(resolve, 50));
    const registry = new Registry();
    new Gauge({
      name: "slow_gauge",
      help: "collected after a moment",
      registers: [registry],
      async collect() {
        await later();
        this.set(1);
      },
    });
    const metrics = await startMetricsServer(registry, 0, async () => {
      await later();
      return true;
    });
    try {
      const base = `http://127.0.0.1:${metrics.port}`;
      expect(await halfClosed(base, "GET /metrics HTTP/1.1\r\nHost: worker\r\n\r\n")).toMatch(
        /^HTTP\/1\.1 200 OK\r\n/,
      );
      expect(await halfClosed(base, "GET /healthz HTTP/1.1\r\nHost: worker\r\n\r\n")).toMatch(
        /^HTTP\/1\.1 200 OK\r\n/,
      );
    } finally {
      await metrics.close();
    }
  });
});
