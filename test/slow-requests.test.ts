/**
 * A request must arrive within FLEET_API_REQUEST_TIMEOUT_MS, headers and body. Fastify turns
 * Node's own bound off, so before, a caller that sent its headers and then trickled the body
 * it announced held its connection for ever: with a key (the route never ran), and without
 * one too (the 401 was sent, and Node went on reading the body). Enough such connections use
 * up the API's file descriptors for every tenant. Here the bound is 1 s; the connections are
 * real sockets to the real API on a real database.
 */
import { connect, type Socket } from "node:net";
import { Ajv2020 } from "ajv/dist/2020.js";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import type { RunningApi } from "../src/producer/api-server.js";
import { ApiKeys } from "../src/shared/store/api-keys.js";
import { createFleetEnv, type FleetEnv } from "./support/fleet-env.js";

/** How long each trickling connection is given to be closed: far past the 1 s bound and Node's check. */
const GIVE_UP_MS = 15_000;

type Trickle = { closed: boolean; received: string; bytesSent: number };

/**
 * Sends `head` (request line and headers, announcing a 1 MB body), then one byte of body
 * every 200 ms until the server closes the socket or GIVE_UP_MS pass.
 */
function trickle(port: number, head: string): Promise<Trickle> {
  return new Promise((resolve) => {
    const socket: Socket = connect(port, "127.0.0.1");
    const state: Trickle = { closed: false, received: "", bytesSent: 0 };
    let ticker: NodeJS.Timeout | undefined;
    const finish = () => {
      clearInterval(ticker);
      clearTimeout(giveUp);
      socket.destroy();
      resolve(state);
    };
    const giveUp = setTimeout(finish, GIVE_UP_MS);
    socket.on("data", (chunk) => {
      state.received += chunk.toString("utf8");
    });
    socket.on("error", () => {});
    socket.on("close", () => {
      state.closed = true;
      finish();
    });
    socket.write(head);
    ticker = setInterval(() => {
      if (socket.writable) {
        socket.write(" ");
        state.bytesSent++;
      }
    }, 200);
  });
}

const head = (authorization: string | null) =>
  "POST /v1/sessions HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/json\r\n" +
  (authorization ? `Authorization: ${authorization}\r\n` : "") +
  "Content-Length: 1000000\r\n\r\n";

describe("a request that does not arrive in time", () => {
  let fleet: FleetEnv;
  let api: RunningApi;
  let key: string;

  beforeAll(async () => {
    fleet = await createFleetEnv("slow-requests", {
      env: { FLEET_API_REQUEST_TIMEOUT_MS: "1000", FLEET_SSE_HEARTBEAT_MS: "300" },
    });
    key = (await new ApiKeys(fleet.database).create("acme")).key;
    ({ api } = await fleet.startApi());
  });

  afterAll(async () => {
    await fleet?.close();
  });

  it("with a key: answered 408 in the error shape, and its connection closed", async () => {
    const result = await trickle(api.port, head(`Bearer ${key}`));
    expect(result.closed, `still open after ${GIVE_UP_MS} ms`).toBe(true);
    expect(result.received).toMatch(/^HTTP\/1\.1 408 /);
    const body = result.received.slice(result.received.indexOf("\r\n\r\n") + 4);
    expect(JSON.parse(body)).toEqual({
      error: { code: "invalid_request", message: "the request took too long to arrive" },
    });
    // The OpenAPI document names this answer (it is sent outside the routes), with its shape.
    // biome-ignore lint/suspicious/noExplicitAny: the served document, read as a client reads it
    const doc: any = await (
      await fetch(`${api.url}/v1/openapi.json`, { headers: { authorization: `Bearer ${key}` } })
    ).json();
    const documented = doc.paths["/v1/sessions"].post.responses["408"];
    expect(documented, "408 is documented").toBeDefined();
    const ajv = new Ajv2020({ strict: false, allErrors: true });
    const check = ajv.compile({
      ...documented.content["application/json"].schema,
      components: doc.components,
    });
    expect(check(JSON.parse(body)), ajv.errorsText(check.errors)).toBe(true);
    // Every operation documents it: any request may arrive too slowly.
    for (const [path, ops] of Object.entries<Record<string, { responses: Record<string, unknown> }>>(
      doc.paths,
    ))
      for (const [method, op] of Object.entries(ops))
        expect(op.responses["408"], `${method} ${path}`).toBeDefined();
  });

  it("without a key: the 401 is sent at once, and the body it announced is not waited for without end", async () => {
    const result = await trickle(api.port, head(null));
    expect(result.received).toMatch(/^HTTP\/1\.1 401 /);
    expect(result.closed, `still open after ${GIVE_UP_MS} ms`).toBe(true);
  });

  it("the bound is on arriving, not on answering: an event stream and an idle keep-alive connection outlive it", async () => {
    const created = await fetch(`${api.url}/v1/sessions`, {
      method: "POST",
      headers: { authorization: `Bearer ${key}`, "content-type": "application/json" },
      body: JSON.stringify({ agent: { model: { provider: "scripted", steps: [{ text: "ok" }] } } }),
    });
    const { id } = (await created.json()) as { id: string };
    // An event stream held 3 s (three times the bound) keeps sending its heartbeats.
    const stream = await new Promise<{ closed: boolean; heartbeatsLate: number }>((resolve) => {
      const socket = connect(api.port, "127.0.0.1");
      const opened = Date.now();
      const state = { closed: false, heartbeatsLate: 0 };
      socket.on("data", (chunk) => {
        if (Date.now() - opened > 2_000)
          state.heartbeatsLate += chunk.toString().split(": heartbeat").length - 1;
      });
      socket.on("error", () => {});
      socket.on("close", () => {
        state.closed = true;
      });
      socket.write(
        `GET /v1/sessions/${id}/events HTTP/1.1\r\nHost: 127.0.0.1\r\nAuthorization: Bearer ${key}\r\n\r\n`,
      );
      setTimeout(() => {
        socket.destroy();
        resolve(state);
      }, 3_000);
    });
    expect(stream.closed).toBe(false);
    expect(stream.heartbeatsLate).toBeGreaterThan(0);
    // A keep-alive connection idle for 2 s between two requests serves the second one.
    const answers = await new Promise<string>((resolve) => {
      const socket = connect(api.port, "127.0.0.1");
      let received = "";
      socket.on("data", (chunk) => {
        received += chunk.toString();
      });
      socket.on("error", () => {});
      const request = "GET /healthz HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n";
      socket.write(request);
      setTimeout(() => socket.write(request), 2_000);
      setTimeout(() => {
        socket.destroy();
        resolve(received);
      }, 3_000);
    });
    expect(answers.match(/HTTP\/1\.1 200 /g)).toHaveLength(2);
  });

  it("a request that arrives in time is served as before", async () => {
    const response = await fetch(`${api.url}/v1/sessions`, {
      method: "POST",
      headers: { authorization: `Bearer ${key}`, "content-type": "application/json" },
      body: JSON.stringify({ agent: { model: { provider: "scripted", steps: [{ text: "ok" }] } } }),
    });
    expect(response.status).toBe(201);
  });
});
