/**
 * A fake fleet API for the client's event streams: each GET is answered by `answer`, given the
 * request's `Last-Event-ID` and URL, with a `410 expired` (the reader's place is gone), a `400`
 * refusing a query parameter (as an API of the last release refuses `?run=`) or an event
 * stream, whole and ended. `asked` holds the Last-Event-ID of each request, in order; `urls`
 * their URLs.
 */
import { createServer } from "node:http";
import type { AddressInfo } from "node:net";

export type EventsAnswer = { gone: string } | { refused: string } | { events: string };

export type FakeEventsApi = {
  /** `http://127.0.0.1:PORT`. */
  readonly url: string;
  /** Each request's Last-Event-ID (undefined: none sent). */
  readonly asked: (string | undefined)[];
  readonly urls: string[];
  close(): Promise<void>;
};

/** Every request answered 410 with `message`. */
export const alwaysGone =
  (message: string): (() => EventsAnswer) =>
  () => ({ gone: message });

/** One event as the API streams it, of session `s1` and run `r1` unless `data` says otherwise. */
export function sseEvent(id: string, type: string, data: Record<string, unknown>): string {
  return `id: ${id}\nevent: ${type}\ndata: ${JSON.stringify({ sessionId: "s1", type, runId: "r1", ...data })}\n\n`;
}

/** Run r1's end and the parking written with it, as a read begun past r1's messages gets them (ids 3-0, 4-0). */
export const R1_END_AND_PARKING =
  sseEvent("3-0", "RUN_COMPLETED", { outcome: "completed" }) +
  sseEvent("4-0", "SESSION_PARKED", { runId: undefined, reason: "attempts_exhausted" });

/**
 * The stream after R1_END_AND_PARKING written anew: r1's stored messages (seq 1, 2), its end
 * and parking again, then run r2 (its message seq 3) to its end.
 */
export const R1_WRITTEN_ANEW_THEN_R2 =
  sseEvent("10-0", "MESSAGE", { message: { role: "user", content: "q", seq: 1 } }) +
  sseEvent("11-0", "MESSAGE", { message: { role: "assistant", content: "a", seq: 2 } }) +
  sseEvent("12-0", "RUN_COMPLETED", { outcome: "completed" }) +
  sseEvent("13-0", "SESSION_PARKED", { runId: undefined, reason: "attempts_exhausted" }) +
  sseEvent("14-0", "RUN_STARTED", { runId: "r2", kind: "run" }) +
  sseEvent("15-0", "MESSAGE", { runId: "r2", message: { role: "user", content: "q2", seq: 3 } }) +
  sseEvent("16-0", "RUN_COMPLETED", { runId: "r2", outcome: "completed" });

export async function startFakeEventsApi(
  answer: (lastEventId: string | undefined, url: string) => EventsAnswer,
): Promise<FakeEventsApi> {
  const asked: (string | undefined)[] = [];
  const urls: string[] = [];
  const server = createServer((request, response) => {
    const last = request.headers["last-event-id"] as string | undefined;
    asked.push(last);
    urls.push(request.url ?? "");
    const answered = answer(last, request.url ?? "");
    if ("gone" in answered) {
      response.writeHead(410, { "content-type": "application/json" });
      response.end(JSON.stringify({ error: { code: "expired", message: answered.gone } }));
      return;
    }
    if ("refused" in answered) {
      response.writeHead(400, { "content-type": "application/json" });
      const field = answered.refused;
      response.end(
        JSON.stringify({
          error: { code: "invalid_request", message: `${field}: is not a parameter of this route`, field },
        }),
      );
      return;
    }
    response.writeHead(200, { "content-type": "text/event-stream" });
    response.end(answered.events);
  });
  await new Promise<void>((resolve) => server.listen(0, "127.0.0.1", resolve));
  return {
    url: `http://127.0.0.1:${(server.address() as AddressInfo).port}`,
    asked,
    urls,
    close: async () => {
      server.closeAllConnections();
      await new Promise((resolve) => server.close(resolve));
    },
  };
}
