/**
 * What the client cannot read in a streamed answer is said, never skipped or thrown as a
 * SyntaxError. An event the client cannot read — its `data:` is not JSON, or not a JSON object, or it has
 * no `event:` line (contracts §7 fixes all three) — rejects `events()` with a FleetApiError
 * `invalid_response` that names the event's id, instead of being skipped: its JSON.parse used
 * to fail like a broken connection, and the reconnect with its id went on after it, so the
 * caller lost the event without a word. The API never sends such an event; a server here
 * does, as a proxy or another release might. A line of `batchResults()` that is not a JSON
 * object is a FleetApiError `invalid_response` naming the line (it was JSON.parse's bare
 * SyntaxError, outside the client's errors).
 */
import { createServer, type Server } from "node:http";
import type { AddressInfo } from "node:net";
import { afterEach, describe, expect, it } from "vitest";
import { type EventsOptions, FleetApiError, FleetClient, type FleetEvent } from "../src/producer/client.js";

const event = (id: number, data: string, type = "MESSAGE_DELTA") =>
  `id: ${id}\nevent: ${type}\ndata: ${data}\n\n`;
const good = (id: number) =>
  event(id, JSON.stringify({ sessionId: "s1", type: "MESSAGE_DELTA", text: `t${id}` }));

describe("an event the client cannot read", () => {
  let server: Server | undefined;
  afterEach(() => new Promise<void>((resolve) => (server ? server.close(() => resolve()) : resolve())));

  /**
   * A stream of three events whose second is `bad`, each connection sending those after its
   * Last-Event-ID and then ending (so a client that skipped one reconnects and goes on).
   */
  async function serve(bad: string): Promise<{ client: FleetClient; connections: (string | undefined)[] }> {
    const events = [good(1), bad, good(3)];
    const connections: (string | undefined)[] = [];
    server = createServer((request, response) => {
      const after = request.headers["last-event-id"] as string | undefined;
      connections.push(after);
      response.writeHead(200, { "content-type": "text/event-stream" });
      response.end(events.slice(after === undefined ? 0 : Number(after)).join(""));
    });
    await new Promise<void>((resolve) => server!.listen(0, "127.0.0.1", resolve));
    const { port } = server.address() as AddressInfo;
    return { client: new FleetClient({ baseUrl: `http://127.0.0.1:${port}` }), connections };
  }

  async function read(stream: AsyncGenerator<FleetEvent>, count: number): Promise<FleetEvent[]> {
    const read: FleetEvent[] = [];
    for await (const item of stream) {
      read.push(item);
      if (read.length === count) break;
    }
    return read;
  }

  it("data that is not JSON rejects events() with a FleetApiError naming the event, after the events before it", async () => {
    const { client, connections } = await serve(event(2, '{"sessionId": "s1", "text": "cut'));
    const seen: string[] = [];
    const error = await (async () => {
      // Bounded: a client that skips the event reconnects for ever (the server ends each stream).
      for await (const item of client.events("s1", { signal: AbortSignal.timeout(3_000) }))
        seen.push(item.id);
    })().catch((e: unknown) => e);
    expect(seen).toEqual(["1"]);
    expect(error).toBeInstanceOf(FleetApiError);
    expect(error).toMatchObject({ status: 200, code: "invalid_response", eventId: "2" });
    expect((error as Error).message).toBe(
      'GET /v1/sessions/s1/events: event 2 (MESSAGE_DELTA) has data that is not JSON: "{\\"sessionId\\": \\"s1\\", \\"text\\": \\"cut"; to read on after it, iterate again with { after: "2" }',
    );
    // Said at once, not after a reconnect that went on past it.
    expect(connections).toEqual([undefined]);
    // The caller decides to read on after it: event 3 follows.
    expect((await read(client.events("s1", { after: "2" }), 1)).map((e) => e.id)).toEqual(["3"]);
  });

  it("data that is JSON but no object (null, a number) is the same error", async () => {
    for (const data of ["null", "42", '["a"]']) {
      const { client } = await serve(event(2, data));
      const error = await read(client.events("s1"), 3).catch((e: unknown) => e);
      expect(error, data).toBeInstanceOf(FleetApiError);
      expect((error as FleetApiError).message, data).toContain(
        `event 2 (MESSAGE_DELTA) has data that is not a JSON object: ${JSON.stringify(data)}`,
      );
      await new Promise<void>((resolve) => server!.close(() => resolve()));
      server = undefined;
    }
  });

  it("an event without its `event:` line is said too, and batchEvents() rejects alike", async () => {
    const { client } = await serve(`id: 2\ndata: {"sessionId": "s1"}\n\n`);
    const error = await read(client.batchEvents("b1", { signal: AbortSignal.timeout(3_000) }), 3).catch(
      (e: unknown) => e,
    );
    expect(error).toMatchObject({ code: "invalid_response", eventId: "2" });
    expect((error as Error).message).toMatch(/^GET \/v1\/batches\/b1\/events: event 2 has no `event:` line;/);
  });
});

describe("a 2xx event stream that is no event stream", () => {
  let server: Server | undefined;
  afterEach(() => new Promise<void>((resolve) => (server ? server.close(() => resolve()) : resolve())));

  it("an HTML or JSON page answered 200 rejects events() and batchEvents() at once, not polled for ever", async () => {
    // A captive portal, a web app at the base URL, a proxy's page: no event in it, so the
    // client read nothing, took the end for a stream that ended and reconnected every 0.25 to
    // 5 s for ever, without an error or an onRetry.
    let connections = 0;
    let page = { type: "text/html; charset=utf-8", body: "<html><body>Sign in to the Wi-Fi</body></html>\n" };
    server = createServer((_request, response) => {
      connections++;
      response.writeHead(200, { "content-type": page.type });
      response.end(page.body);
    });
    await new Promise<void>((resolve) => server!.listen(0, "127.0.0.1", resolve));
    const { port } = server.address() as AddressInfo;
    const client = new FleetClient({ baseUrl: `http://127.0.0.1:${port}` });
    for (const streamOf of [
      (options: EventsOptions) => client.events("s1", options),
      (options: EventsOptions) => client.batchEvents("b1", options),
    ]) {
      for (const answer of [page, { type: "application/json", body: '{"ok":true}' }]) {
        page = answer;
        connections = 0;
        const retries: unknown[] = [];
        const error = await (async () => {
          const signal = AbortSignal.timeout(2_000);
          for await (const item of streamOf({ signal, onRetry: (why) => retries.push(why) })) void item;
          return "ended";
        })().catch((e: unknown) => e);
        expect(error).toBeInstanceOf(FleetApiError);
        expect(error).toMatchObject({ status: 200, code: "invalid_response" });
        expect((error as Error).message).toContain(`content-type ${answer.type}`);
        expect(connections).toBe(1);
        expect(retries).toEqual([]);
      }
    }
  });
});

describe("a line of batchResults() the client cannot read", () => {
  let server: Server | undefined;
  afterEach(() => new Promise<void>((resolve) => (server ? server.close(() => resolve()) : resolve())));

  it("is a FleetApiError naming the line, after the results before it", async () => {
    const result = JSON.stringify({ customId: "a", sessionId: "s1", status: "completed", output: "ok" });
    server = createServer((_request, response) => {
      response.writeHead(200, { "content-type": "application/x-ndjson" });
      response.end(`${result}\n\n<html>502 Bad Gateway</html>\n${result}\n`);
    });
    await new Promise<void>((resolve) => server!.listen(0, "127.0.0.1", resolve));
    const { port } = server.address() as AddressInfo;
    const client = new FleetClient({ baseUrl: `http://127.0.0.1:${port}` });
    const seen: string[] = [];
    const error = await (async () => {
      for await (const line of client.batchResults("b1")) seen.push(line.customId ?? "");
    })().catch((e: unknown) => e);
    expect(seen).toEqual(["a"]);
    expect(error).toBeInstanceOf(FleetApiError);
    expect(error).toMatchObject({ status: 200, code: "invalid_response" });
    expect((error as Error).message).toBe(
      'GET /v1/batches/b1/results: line 3 is not a JSON object: "<html>502 Bad Gateway</html>"',
    );
  });
});
