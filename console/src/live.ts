/**
 * Live updates of a session (contracts §7). EventSource cannot send `Authorization`, so the
 * stream is read with fetch and parsed as it arrives (event-parser.ts). A cut stream reconnects with
 * `Last-Event-ID`, so no event is lost or repeated; an id the API no longer keeps (410)
 * starts again from the latest run and asks the page to reload the session.
 *
 * An API without the events route (404 for the route, not for the session), or one that
 * refuses another stream (429), is polled instead: `onPoll` every second, trying the
 * stream again now and then, so that the page is live either way. A stream that fails (no
 * answer: the API away, the network gone; or silent too long) is tried again with backoff,
 * told through `onRetry`, so that the page can say it is not live and why: it said
 * "connecting…" all the while, as when it opens.
 */
import { sleep } from "./abortable-sleep";
import { ApiError, authHeaders, failure, paths, storedKey } from "./api";
import { eventParser, type FleetEvent } from "./event-parser";
import type { ReadRetry } from "./read-retry";
import { streamWaitMs } from "./retry-wait";

export type { FleetEvent };

export type LiveMode = "connecting" | "stream" | "polling" | "stopped";

export type LiveOptions = {
  onEvent: (event: FleetEvent) => void;
  /** The events after the last one seen may be gone (410): reload everything. */
  onReset: () => void;
  /** Polling (no usable stream): called every `pollMs`. */
  onPoll: () => Promise<void>;
  onMode: (mode: LiveMode) => void;
  /** The session is not (or no longer) there for this key: stop. */
  onMissing: () => void;
  /** The stream failed and is tried again in `inMs` (try `attempt`); null once it is had again or given up. */
  onRetry?: (retry: ReadRetry | null) => void;
  pollMs?: number;
};

/**
 * How long a stream may bring nothing (no event, no `: heartbeat`, which the API sends every
 * FLEET_SSE_HEARTBEAT_MS, 15 s by default) before it is taken as broken and opened again with
 * `Last-Event-ID`: four heartbeats, as `fleet.events`'s `idleTimeoutMs`. A connection cut
 * without a FIN or RST (a network change, a proxy that holds it) left the page waiting on its
 * read for ever, saying "live (event stream)" and showing nothing of what the session did next.
 */
export const STREAM_IDLE_MS = 60_000;

/** Follows a session until `stop()` is called. */
export function followSession(sessionId: string, options: LiveOptions): { stop: () => void } {
  const controller = new AbortController();
  const { signal } = controller;
  const pollMs = options.pollMs ?? 1_000;
  let lastId: string | undefined;
  /** Why the latest connection failed, as the page says it. */
  let lastFailure: unknown;

  /**
   * One connection: resolves when it ends; "poll" when the stream cannot be had; "error" (or a
   * rejection: tried again with backoff) when it failed or stayed silent for STREAM_IDLE_MS.
   */
  const connect = async (): Promise<"ended" | "poll" | "missing" | "error"> => {
    // A connection of its own, dropped when the page stops following or it stays silent.
    const connection = new AbortController();
    const drop = () => connection.abort();
    signal.addEventListener("abort", drop, { once: true });
    let quiet: ReturnType<typeof setTimeout> | undefined;
    let silent = false;
    const heard = () => {
      clearTimeout(quiet);
      quiet = setTimeout(() => {
        silent = true;
        drop();
      }, STREAM_IDLE_MS);
    };
    try {
      heard();
      const outcome = await connectOnce(connection.signal, heard).catch((error: unknown) => {
        if (!silent) throw error;
        return "error" as const;
      });
      if (silent) lastFailure = new Error(`it brought nothing for ${STREAM_IDLE_MS / 1000} s`);
      return outcome;
    } finally {
      clearTimeout(quiet);
      signal.removeEventListener("abort", drop);
    }
  };

  /** Reads one connection's events; `heard` is called at its answer and at each chunk. */
  const connectOnce = async (
    connection: AbortSignal,
    heard: () => void,
  ): Promise<"ended" | "poll" | "missing" | "error"> => {
    const key = storedKey();
    const headers = authHeaders({ accept: "text/event-stream" }, key);
    if (lastId !== undefined) headers["last-event-id"] = lastId;
    const response = await fetch(paths.events(sessionId), { headers, signal: connection, cache: "no-store" });
    heard();
    if (response.status === 410) {
      lastId = undefined;
      options.onReset();
      return "ended";
    }
    const type = response.headers.get("content-type") ?? "";
    if (!response.ok || !type.startsWith("text/event-stream") || !response.body) {
      const error = response.ok ? undefined : await failure(response, key);
      // A 404 for the session itself: it is gone for this key. For the route: no events API.
      if (error?.status === 404 && !/^no route/.test(error.message)) return "missing";
      lastFailure = error ?? new Error(`the answer was not an event stream (${type || "no content type"})`);
      return "poll";
    }
    options.onMode("stream");
    options.onRetry?.(null);
    const reader = response.body.pipeThrough(new TextDecoderStream()).getReader();
    const parser = eventParser((event) => {
      if (event.id) lastId = event.id;
      options.onEvent(event);
    });
    for (;;) {
      const { value, done } = await reader.read();
      if (done) return connection.aborted ? "error" : "ended";
      heard();
      parser.push(value);
    }
  };

  (async () => {
    let failures = 0;
    /** Refusals of the stream in a row that asked for a wait (a 429's or a 503's Retry-After). */
    let refusals = 0;
    while (!signal.aborted) {
      options.onMode("connecting");
      let outcome: "ended" | "poll" | "missing" | "error";
      lastFailure = new Error("the stream was cut");
      try {
        outcome = await connect();
      } catch (error) {
        outcome = "error";
        lastFailure = error;
      }
      if (signal.aborted) break;
      if (outcome === "missing") {
        options.onMissing();
        break;
      }
      if (outcome === "poll") {
        // Poll for a while, then try the stream again (the route may have come up) — not
        // before the refusal's Retry-After, which is said: the stream was asked for again
        // after 15 polls whatever the API had asked, and the page said only "polling".
        const refusal = lastFailure instanceof ApiError ? lastFailure : undefined;
        const wait = streamWaitMs(refusals + 2, pollMs, refusal?.status, refusal?.retryAfter);
        refusals = wait.asked ? refusals + 1 : 0;
        options.onMode("polling");
        options.onRetry?.(wait.asked ? { attempt: refusals + 1, inMs: wait.ms, failure: lastFailure } : null);
        const until = Date.now() + wait.ms;
        do {
          await options.onPoll().catch(() => {});
          await sleep(Math.min(pollMs, Math.max(0, until - Date.now())), signal);
        } while (Date.now() < until && !signal.aborted);
        continue;
      }
      refusals = 0;
      if (outcome === "ended") failures = 0;
      else failures += 1;
      // A stream the server ended comes back at once; a failing one with backoff up to 5 s.
      const inMs = failures === 0 ? 250 : Math.min(5_000, 500 * 2 ** failures);
      if (failures > 0) options.onRetry?.({ attempt: failures + 1, inMs, failure: lastFailure });
      await sleep(inMs, signal);
    }
    options.onRetry?.(null);
    options.onMode("stopped");
  })();

  return { stop: () => controller.abort() };
}
