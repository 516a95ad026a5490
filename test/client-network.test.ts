/**
 * The client when no whole answer comes: nothing listening at the URL, a host name that does
 * not resolve, a connection the server destroys before or while it answers. Each call rejects
 * with a FleetNetworkError naming the method and URL, its code and cause kept, and nothing is
 * sent again on its own (a POST may have been done). A fake HTTP server plays the API.
 */
import { createServer, type IncomingMessage, type Server, type ServerResponse } from "node:http";
import type { AddressInfo } from "node:net";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { FleetApiError, FleetClient, FleetNetworkError } from "../src/index.js";

type Handler = (request: IncomingMessage, response: ServerResponse) => void;

/** A port nothing listens on: one a server just let go. */
async function closedPort(): Promise<number> {
  const server = createServer();
  await new Promise<void>((resolve) => server.listen(0, "127.0.0.1", resolve));
  const { port } = server.address() as AddressInfo;
  await new Promise((resolve) => server.close(resolve));
  return port;
}

const rejection = (promise: Promise<unknown>) =>
  promise.then(
    () => undefined,
    (e: unknown) => e,
  );

describe("the client when no whole answer comes", () => {
  let server: Server;
  let base: string;
  let client: FleetClient;
  let handler: Handler = () => {};
  let requests: string[] = [];

  beforeAll(async () => {
    server = createServer((request, response) => {
      requests.push(`${request.method} ${request.url}`);
      handler(request, response);
    });
    await new Promise<void>((resolve) => server.listen(0, "127.0.0.1", resolve));
    base = `http://127.0.0.1:${(server.address() as AddressInfo).port}`;
    client = new FleetClient({ baseUrl: base });
  });
  afterAll(async () => {
    server.closeAllConnections();
    await new Promise((resolve) => server.close(resolve));
  });

  it("nothing listening: a FleetNetworkError with the method, URL, code and cause", async () => {
    const port = await closedPort();
    const error = await rejection(new FleetClient({ baseUrl: `http://127.0.0.1:${port}` }).getRun("r1"));
    expect(error).toBeInstanceOf(FleetNetworkError);
    expect(error).toBeInstanceOf(TypeError); // what fetch rejected with before: catching that still works
    expect(error).not.toBeInstanceOf(FleetApiError);
    expect(error).toMatchObject({
      name: "FleetNetworkError",
      method: "GET",
      url: `http://127.0.0.1:${port}/v1/runs/r1`,
      code: "ECONNREFUSED",
    });
    expect((error as Error).message).toBe(
      `GET http://127.0.0.1:${port}/v1/runs/r1 failed: connect ECONNREFUSED 127.0.0.1:${port}`,
    );
    expect((error as Error).cause).toMatchObject({ code: "ECONNREFUSED", port });
  });

  it("a request that cannot be sent (an API key outside ASCII) is no FleetNetworkError: refused when the client is made, nothing sent", async () => {
    requests = [];
    const error = await rejection(
      Promise.resolve().then(() => new FleetClient({ baseUrl: base, apiKey: "fk_clé€" })),
    );
    expect(error).toBeInstanceOf(TypeError);
    expect(error).not.toBeInstanceOf(FleetNetworkError);
    expect(requests).toEqual([]);
  });

  it("https:// to an API that speaks plain HTTP: one line saying so, not OpenSSL's raw error", async () => {
    // A newcomer's FLEET_API_URL=https://… for `fleet api`, which serves plain HTTP: the line
    // was `… failed: 80ECECD9C17F0000:error:0A00010B:SSL routines:ssl3_get_record:wrong version
    // number:../deps/openssl/openssl/ssl/record/ssl3_record.c:350:` and a line break.
    const tls = new FleetClient({ baseUrl: base.replace("http://", "https://") });
    const error = await rejection(tls.getSession("s1"));
    expect(error).toBeInstanceOf(FleetNetworkError);
    expect(error).toMatchObject({
      code: "ERR_SSL_WRONG_VERSION_NUMBER",
      message: `GET ${base.replace("http://", "https://")}/v1/sessions/s1 failed: TLS: wrong version number (the server does not answer in TLS: is the URL http://, not https://?)`,
    });
  });

  it("several addresses refused (IPv6 and IPv4: an AggregateError): the first one's code and message", () => {
    const refused = (address: string) =>
      Object.assign(new Error(`connect ECONNREFUSED ${address}`), { code: "ECONNREFUSED" });
    const both = new AggregateError([refused("::1:3000"), refused("127.0.0.1:3000")]);
    const error = new FleetNetworkError(
      "GET",
      "http://localhost:3000/v1/runs/r1",
      new TypeError("fetch failed", { cause: both }),
    );
    expect(error.message).toBe("GET http://localhost:3000/v1/runs/r1 failed: connect ECONNREFUSED ::1:3000");
    expect(error.code).toBe("ECONNREFUSED");
    expect(error.cause).toBe(both);
  });

  it("a host name that does not resolve: the same, with the resolver's code", async () => {
    const error = await rejection(new FleetClient({ baseUrl: "http://fleet-api.invalid" }).getRun("r1"));
    expect(error).toBeInstanceOf(FleetNetworkError);
    expect((error as FleetNetworkError).code).toMatch(/^(ENOTFOUND|EAI_AGAIN)$/);
    expect((error as Error).message).toMatch(
      /^GET http:\/\/fleet-api\.invalid\/v1\/runs\/r1 failed: getaddrinfo/,
    );
  });

  it("a connection destroyed before the answer: one POST, no retry, with or without a key", async () => {
    handler = (request) => request.socket.destroy();
    requests = [];
    const error = await rejection(client.send("s1", "hello"));
    expect(error).toBeInstanceOf(FleetNetworkError);
    expect(error).toMatchObject({
      method: "POST",
      url: `${base}/v1/sessions/s1/messages`,
      code: "UND_ERR_SOCKET",
    });
    expect((error as Error).message).toBe(`POST ${base}/v1/sessions/s1/messages failed: other side closed`);
    const keyed = await rejection(client.send("s1", "hello", { idempotencyKey: "k1" }));
    expect(keyed).toBeInstanceOf(FleetNetworkError);
    expect(requests).toEqual(["POST /v1/sessions/s1/messages", "POST /v1/sessions/s1/messages"]);
  });

  it("a connection destroyed in the middle of the answer: JSON calls and batch results", async () => {
    const asked: string[] = [];
    handler = (request, response) => {
      asked.push(request.url ?? "");
      const results = request.url?.includes("/results");
      response.writeHead(200, { "content-type": results ? "application/x-ndjson" : "application/json" });
      // Results read on after the last session read: the rest of them, whole.
      if (request.url?.endsWith("/results?after=s"))
        return void response.end('{"customId":"b","sessionId":"t"}\n');
      response.write(results ? '{"customId":"a","sessionId":"s"}\n{"cust' : '{"id":"s1","mess');
      setTimeout(() => request.socket.destroy(), 20);
    };
    const error = await rejection(client.getSession("s1"));
    expect(error).toBeInstanceOf(FleetNetworkError);
    expect((error as Error).message).toBe(
      `GET ${base}/v1/sessions/s1 failed while reading the answer: other side closed`,
    );
    // Batch results go on after the last session read (client-results-resume.test.ts), so each
    // line comes once; a read broken before its first line is said.
    const seen: string[] = [];
    asked.length = 0;
    for await (const result of client.batchResults("b1")) seen.push(result.sessionId);
    expect(seen).toEqual(["s", "t"]);
    expect(asked).toEqual(["/v1/batches/b1/results", "/v1/batches/b1/results?after=s"]);
    handler = (request, response) => {
      response.writeHead(200, { "content-type": "application/x-ndjson" });
      response.write('{"customId":"a","sess');
      setTimeout(() => request.socket.destroy(), 20);
    };
    const results = await rejection(
      (async () => {
        for await (const result of client.batchResults("b1")) seen.push(result.sessionId);
      })(),
    );
    expect(results).toBeInstanceOf(FleetNetworkError);
    expect((results as Error).message).toBe(
      `GET ${base}/v1/batches/b1/results failed while reading the answer: other side closed`,
    );
  });

  it("events: failIfUnreachable rejects with one, and onRetry is told one for a broken stream", async () => {
    const port = await closedPort();
    const unreachable = new FleetClient({ baseUrl: `http://127.0.0.1:${port}` });
    const first = await rejection(
      (async () => {
        for await (const _ of unreachable.events("s1", { failIfUnreachable: true }));
      })(),
    );
    expect(first).toBeInstanceOf(FleetNetworkError);
    expect(first).toMatchObject({
      code: "ECONNREFUSED",
      url: `http://127.0.0.1:${port}/v1/sessions/s1/events`,
    });

    handler = (request, response) => {
      response.writeHead(200, { "content-type": "text/event-stream" });
      response.write(
        'id: 1-0\nevent: MESSAGE_DELTA\ndata: {"type":"MESSAGE_DELTA","sessionId":"s1","runId":"r1","text":"hi"}\n\n',
      );
      setTimeout(() => request.socket.destroy(), 20);
    };
    const controller = new AbortController();
    const reasons: unknown[] = [];
    const texts: string[] = [];
    for await (const event of client.events("s1", {
      signal: controller.signal,
      onRetry: (reason) => {
        reasons.push(reason);
        controller.abort();
      },
    }))
      if (event.type === "MESSAGE_DELTA") texts.push(event.data.text);
    expect(texts).toEqual(["hi"]);
    expect(reasons).toHaveLength(1);
    expect(reasons[0]).toBeInstanceOf(FleetNetworkError);
    expect((reasons[0] as Error).message).toBe(
      `GET ${base}/v1/sessions/s1/events failed while reading the answer: other side closed`,
    );
  });

  it("events: a connection that goes silent (no event, no heartbeat) is made anew after idleTimeoutMs", async () => {
    // A network cut that sends no FIN or RST (a NAT or load balancer that forgot the
    // connection, a cable pulled) leaves the socket open: the client read nothing more until
    // undici's body timeout, 300 s later, although the API sends a heartbeat every 15 s.
    const connections: (string | undefined)[] = [];
    handler = (request, response) => {
      const after = request.headers["last-event-id"] as string | undefined;
      connections.push(after);
      response.writeHead(200, { "content-type": "text/event-stream" });
      const id = after === undefined ? 1 : Number(after) + 1;
      response.write(
        `id: ${id}\nevent: MESSAGE_DELTA\ndata: {"sessionId":"s1","type":"MESSAGE_DELTA","text":"t${id}"}\n\n`,
      );
      // then silence, the socket left open
    };
    const reasons: unknown[] = [];
    const ids: string[] = [];
    const started = Date.now();
    for await (const event of client.events("s1", {
      idleTimeoutMs: 300,
      signal: AbortSignal.timeout(10_000),
      onRetry: (reason) => reasons.push(reason),
    })) {
      ids.push(event.id);
      if (ids.length === 3) break;
    }
    expect(ids).toEqual(["1", "2", "3"]);
    expect(connections).toEqual([undefined, "1", "2"]);
    expect(Date.now() - started).toBeLessThan(5_000);
    expect(reasons).toHaveLength(2);
    expect((reasons[0] as Error).message).toContain("nothing for 300 ms");
  });

  it("events: failIfUnreachable with an API that takes the connection and answers nothing reconnects after idleTimeoutMs", async () => {
    // An API whose event loop is stuck, or a proxy with no backend that holds the request: the
    // connection is accepted, so there is an API. `fleet watch` (failIfUnreachable) printed
    // "…brought nothing for 60000 ms (no event, no heartbeat); reconnecting" after a minute and
    // then exited 1 without reconnecting: the idle timeout's abort was taken for "no API at all".
    const connections: number[] = [];
    handler = (_request, response) => {
      connections.push(Date.now());
      if (connections.length < 3) return; // no answer at all, the socket left open
      response.writeHead(200, { "content-type": "text/event-stream" });
      response.write(
        'id: 1-0\nevent: MESSAGE_DELTA\ndata: {"sessionId":"s1","type":"MESSAGE_DELTA","text":"hi"}\n\n',
      );
    };
    const reasons: unknown[] = [];
    const texts: string[] = [];
    const outcome = await rejection(
      (async () => {
        for await (const event of client.events("s1", {
          failIfUnreachable: true,
          idleTimeoutMs: 300,
          maxReconnectDelayMs: 50,
          signal: AbortSignal.timeout(10_000),
          onRetry: (reason) => reasons.push(reason),
        })) {
          if (event.type === "MESSAGE_DELTA") texts.push(event.data.text);
          break;
        }
      })(),
    );
    expect(outcome, String(outcome)).toBeUndefined();
    expect(texts).toEqual(["hi"]);
    expect(connections).toHaveLength(3);
    expect(reasons.map((r) => (r as Error).message)).toEqual([
      "GET /v1/sessions/s1/events: the connection brought nothing for 300 ms (no event, no heartbeat); reconnecting",
      "GET /v1/sessions/s1/events: the connection brought nothing for 300 ms (no event, no heartbeat); reconnecting",
    ]);
  });
});
