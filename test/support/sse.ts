/** Reading Server-Sent Events in tests: one connection at a time, cut wherever the test wants. */
import { createServer } from "node:http";
import type { AddressInfo } from "node:net";
import Fastify, { type FastifyInstance } from "fastify";
import { type FleetEvent, parseSse } from "../../src/producer/client.js";
import type { EventStreams } from "../../src/producer/event-stream.js";

export type SseRead = { status: number; events: FleetEvent[]; body?: unknown; contentType: string | null };

/**
 * Opens `url` (with `Last-Event-ID: after` when given) and reads events until `stop` says so
 * (then the connection is cut) or `timeoutMs` passes (then it throws). A non-200 answer is
 * returned with its parsed body.
 */
export async function readSse(
  url: string,
  options: {
    after?: string;
    headers?: Record<string, string>;
    stop: (event: FleetEvent, all: FleetEvent[]) => boolean;
    timeoutMs?: number;
  },
): Promise<SseRead> {
  const controller = new AbortController();
  const timer = setTimeout(() => controller.abort(new Error("timed out")), options.timeoutMs ?? 20_000);
  const headers: Record<string, string> = { accept: "text/event-stream", ...options.headers };
  if (options.after !== undefined) headers["last-event-id"] = options.after;
  try {
    const response = await fetch(url, { headers, signal: controller.signal });
    const contentType = response.headers.get("content-type");
    if (response.status !== 200 || !response.body) {
      const text = await response.text();
      return { status: response.status, events: [], body: text ? JSON.parse(text) : undefined, contentType };
    }
    const events: FleetEvent[] = [];
    try {
      for await (const raw of parseSse(response.body as AsyncIterable<Uint8Array>)) {
        if (raw.type === undefined || raw.data === undefined) continue;
        const event = { id: raw.id ?? "", type: raw.type, data: JSON.parse(raw.data) };
        events.push(event);
        if (options.stop(event, events)) break;
      }
    } catch (error) {
      if (controller.signal.aborted)
        throw new Error(
          `no stop after ${options.timeoutMs ?? 20_000} ms; events so far: ${events.map((e) => e.type).join(", ")}`,
        );
      throw error;
    }
    return { status: 200, events, contentType };
  } finally {
    clearTimeout(timer);
    controller.abort();
  }
}

/** `fleet_sse_clients` of the API at `base`: event streams it is serving now. */
export async function sseClients(base: string): Promise<number> {
  const text = await (await fetch(`${base}/metrics`)).text();
  return Number(/^fleet_sse_clients(?:\{[^}]*\})? (\d+)$/m.exec(text)?.[1] ?? Number.NaN);
}

/**
 * `streams` served alone on a bare Fastify, tenant `default`: `GET {base}/events/:id` is a
 * session's stream. Closing the app closes the streams.
 */
export async function serveSessionStreams(
  streams: EventStreams,
): Promise<{ app: FastifyInstance; base: string }> {
  const app = Fastify();
  app.get<{ Params: { id: string } }>("/events/:id", (request, reply) =>
    streams.session(request, reply, "default", request.params.id),
  );
  app.addHook("onClose", () => streams.close());
  await app.listen({ port: 0, host: "127.0.0.1" });
  return { app, base: `http://127.0.0.1:${(app.server.address() as AddressInfo).port}` };
}

/**
 * A server that answers every request with these events as one whole event stream, then
 * ends it (a fixed past for a reader such as `fleet watch --once`). Each event's data is
 * `{sessionId: "s1", type, ...data}`.
 */
export async function servePastEvents(
  events: readonly { id: string; type: string; data: Record<string, unknown> }[],
): Promise<{ url: string; close: () => Promise<void> }> {
  const server = createServer((_request, response) => {
    response.writeHead(200, { "content-type": "text/event-stream" });
    for (const event of events)
      response.write(
        `id: ${event.id}\nevent: ${event.type}\ndata: ${JSON.stringify({ sessionId: "s1", type: event.type, ...event.data })}\n\n`,
      );
    response.end();
  });
  await new Promise<void>((resolve) => server.listen(0, "127.0.0.1", resolve));
  return {
    url: `http://127.0.0.1:${(server.address() as AddressInfo).port}`,
    close: async () => {
      server.closeAllConnections();
      await new Promise((resolve) => server.close(resolve));
    },
  };
}
