/**
 * `fleet watch` against an API that answers 5xx for a while (Postgres away, a proxy's 502):
 * the stream reconnects as before, and now says why on stderr, once per cause in a row —
 * before, a script saw nothing at all until the API answered. The client's `onRetry` option
 * tells each reconnect's cause. A fake HTTP server plays the API.
 */
import { createServer, type Server } from "node:http";
import type { AddressInfo } from "node:net";
import { Writable } from "node:stream";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { watchCommand } from "../src/commands/watch.js";

const sink = (lines: string[]) =>
  new Writable({
    write(chunk, _encoding, done) {
      lines.push(...String(chunk).split("\n").filter(Boolean));
      done();
    },
  });

describe("fleet watch while the API answers 5xx", () => {
  let server: Server;
  let url: string;
  let asked = 0;

  beforeAll(async () => {
    server = createServer((_request, response) => {
      asked++;
      if (asked <= 3) {
        response.writeHead(503, { "content-type": "application/json", "retry-after": "1" });
        response.end(JSON.stringify({ error: { code: "unavailable", message: "Postgres is unreachable" } }));
        return;
      }
      response.writeHead(200, { "content-type": "text/event-stream" });
      const data = { sessionId: "s1", runId: "r1", outcome: "completed" };
      response.end(`id: 1-0\nevent: RUN_COMPLETED\ndata: ${JSON.stringify(data)}\n\n`);
    });
    await new Promise<void>((resolve) => server.listen(0, "127.0.0.1", resolve));
    url = `http://127.0.0.1:${(server.address() as AddressInfo).port}`;
  });
  afterAll(async () => {
    server.closeAllConnections();
    await new Promise((resolve) => server.close(resolve));
  });

  it("says why it reconnects, once for three 503s, then prints the events", async () => {
    const out: string[] = [];
    const err: string[] = [];
    const code = await watchCommand("s1", {
      api: url,
      once: true,
      json: true,
      io: { stdout: sink(out), stderr: sink(err) },
      signal: new AbortController().signal,
    });
    expect(code).toBe(0);
    expect(asked).toBe(4);
    expect(err).toEqual(["fleet watch: the API answered 503 (unavailable); reconnecting"]);
    expect(out.map((line) => JSON.parse(line).type)).toEqual(["RUN_COMPLETED"]);
  }, 30_000);
});

describe("fleet watch --after with an id the API refuses", () => {
  // The client sends --after as Last-Event-ID, so the API's 400 named a header the user never
  // gave: `fleet watch: Last-Event-ID: must be an event id …` for `--after bogus`.
  let server: Server;
  let url: string;

  beforeAll(async () => {
    server = createServer((request, response) => {
      // The API's answer to a malformed Last-Event-ID (src/producer, events routes).
      expect(request.headers["last-event-id"]).toBe("bogus");
      response.writeHead(400, { "content-type": "application/json" });
      const message = "Last-Event-ID: must be an event id as the stream sent it (e.g. 1700000000000-0)";
      response.end(JSON.stringify({ error: { code: "invalid_request", message, field: "Last-Event-ID" } }));
    });
    await new Promise<void>((resolve) => server.listen(0, "127.0.0.1", resolve));
    url = `http://127.0.0.1:${(server.address() as AddressInfo).port}`;
  });
  afterAll(async () => {
    server.closeAllConnections();
    await new Promise((resolve) => server.close(resolve));
  });

  it("names --after, exit 2", async () => {
    const err: string[] = [];
    const code = await watchCommand("s1", {
      api: url,
      after: "bogus",
      io: { stdout: sink([]), stderr: sink(err) },
      signal: new AbortController().signal,
    });
    expect(code).toBe(2);
    expect(err).toEqual([
      "fleet watch: --after: must be an event id as the stream sent it (e.g. 1700000000000-0)",
    ]);
  });
});
