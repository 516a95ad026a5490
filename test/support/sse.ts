/** Reading Server-Sent Events in tests: one connection at a time, cut wherever the test wants. */
import { get, type IncomingMessage } from "node:http";
import { type FleetEvent, parseSse } from "../../src/producer/client.js";

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
 * A live-events reader that stops reading after its first bytes: its socket fills and the API
 * waits on it, until `resume()`. `seen`: the events it got, each with the number its
 * SESSION_PARKED reason starts with (`r<n> …`); `ended()`: whether the API ended the stream.
 */
export async function stuckReader(
  url: string,
): Promise<{ seen: { id: string; n: number }[]; ended: () => boolean; resume: () => void }> {
  const seen: { id: string; n: number }[] = [];
  let ended = false;
  let buffer = "";
  const response = await new Promise<IncomingMessage>((resolve) =>
    get(url, (res) => {
      res.setEncoding("utf8");
      res.on("data", (chunk: string) => {
        buffer += chunk;
        const blocks = buffer.split("\n\n");
        buffer = blocks.pop() ?? "";
        for (const block of blocks) {
          const eventId = /^id: (.*)$/m.exec(block)?.[1];
          const data = /^data: (.*)$/m.exec(block)?.[1];
          if (eventId && data)
            seen.push({ id: eventId, n: Number(/^r(\d+)/.exec(JSON.parse(data).reason)![1]) });
        }
      });
      res.on("end", () => {
        ended = true;
      });
      res.once("data", () => res.pause());
      resolve(res);
    }),
  );
  return { seen, ended: () => ended, resume: () => response.resume() };
}
