/**
 * The client's event streams (contracts §7): one stream that reconnects by itself with the
 * last id it received, and one run's events from its RUN_STARTED to its RUN_COMPLETED.
 */
import type { FleetEvent } from "../shared/api-events.js";
import { type ApiTransport, MAX_TIMER_MS, sleep, waitMs } from "./api-transport.js";
import { apiError, FleetApiError, parseJson, quotedStart, refusesParameter } from "./client-errors.js";
import type { EventsOptions } from "./client-options.js";
import { parseSse } from "./server-sent-events.js";
import { rereadStep } from "./stream-reread.js";

/** How long a connection of an event stream may bring nothing before it is made anew. */
const DEFAULT_IDLE_TIMEOUT_MS = 60_000;

/**
 * The events of one run, from its RUN_STARTED to its RUN_COMPLETED (`stream()`, `streamResume()`);
 * a deleted session's ends with its SESSION_DELETED, also when the run had not started.
 */
export async function* runEvents(
  http: ApiTransport,
  sessionId: string,
  runId: string,
  signal?: AbortSignal,
): AsyncGenerator<FleetEvent> {
  const controller = new AbortController();
  const onAbort = () => controller.abort(signal?.reason);
  signal?.addEventListener("abort", onAbort, { once: true });
  if (signal?.aborted) onAbort();
  let started = false;
  // From that run's RUN_STARTED (`?run=`): the session's latest run may be another one by the
  // time this connects (a follow-up message queued meanwhile).
  const base = `/v1/sessions/${encodeURIComponent(sessionId)}/events`;
  let path = `${base}?run=${encodeURIComponent(runId)}`;
  let after: string | undefined;
  const step = rereadStep();
  /** The 410 a re-read of the session's latest run follows (an API that refuses `?run=`). */
  let rereadLatest: FleetApiError | undefined;
  /** Thrown when this run's end is in no re-read (notLatest): not a 410 to follow. */
  let lost: FleetApiError | undefined;
  try {
    for (;;) {
      try {
        for await (const event of eventStream(http, path, { signal: controller.signal, after })) {
          if (event.id) after = event.id;
          const other = otherLatestRun(rereadLatest, started, runId, event);
          if (rereadLatest && other) {
            lost = notLatest(rereadLatest, runId, other);
            throw lost;
          }
          // Its RUN_STARTED, or (when that is no longer kept) its first event still kept.
          if (event.data.runId === runId) {
            started = true;
            rereadLatest = undefined;
          }
          // The session's deletion ends the stream before the run ever starts (a queued run
          // never does): said, not an iteration that ends with nothing.
          if (!started && event.type !== "SESSION_DELETED") continue;
          if (!step.pass(event)) continue;
          yield event;
          if (event.type === "RUN_COMPLETED" && event.data.runId === runId) return;
        }
        return;
      } catch (error) {
        if (error === lost) throw error;
        // Its own reconnect's place is gone (the stream written anew: stream-reread.ts): the
        // run again from its start, what was yielded left out.
        if (after !== undefined && step.follow(error)) {
          after = undefined;
          // An API that refuses `?run=` reads again from the session's latest run: when that
          // is another run, this one's end is in no re-read (otherLatestRun).
          if (path === base && started) rereadLatest = error as FleetApiError;
          started = false;
          continue;
        }
        // An API from before `?run=` (a rolling upgrade) refuses the parameter: follow the
        // session from its latest run, as that API's own client does (or from the last event
        // read, when an API of this release served the first part).
        if (path === base || !refusesParameter(error, "run")) throw error;
        path = base;
      }
    }
  } finally {
    signal?.removeEventListener("abort", onAbort);
    controller.abort();
  }
}

/**
 * The run a re-read of the session's latest run (after `gone`, a 410; none: not such a
 * re-read) starts with when it is not `runId`, whose events were yielded before (`started`
 * is then false until one of them comes again): null when it is `runId`, or not yet known (pure).
 */
function otherLatestRun(
  gone: FleetApiError | undefined,
  started: boolean,
  runId: string,
  event: FleetEvent,
): string | null {
  if (!gone || started) return null;
  const run = (event.data as { runId?: unknown }).runId;
  return typeof run === "string" && run !== runId ? run : null;
}

/**
 * What a run's events reject with when its re-read after `gone` (a 410) starts at a later run:
 * an API from before `?run=` re-reads only the session's latest run, so this run's end would
 * never come (the iteration waited for it for ever).
 */
function notLatest(gone: FleetApiError, runId: string, latest: string): FleetApiError {
  return new FleetApiError(
    gone.status,
    gone.code,
    `${gone.message}; re-read from the session's latest run, as this API (which refuses \`?run=\`) does, run ${runId} is no longer the session's latest (${latest} is): its end is in no re-read; read how it ended with getRun() or waitForRun()`,
  );
}

/**
 * An event as the stream sent it — an `event:` line with its type and a `data:` line holding
 * a JSON object (contracts §7) — or what is wrong with it, in words (pure).
 */
export function readEvent(raw: { id?: string; type?: string; data?: string }): FleetEvent | string {
  if (raw.type === undefined) return "has no `event:` line";
  if (raw.data === undefined) return "has no `data:` line";
  const quoted = quotedStart(raw.data);
  let data: unknown;
  try {
    data = JSON.parse(raw.data);
  } catch {
    return `has data that is not JSON: ${quoted}`;
  }
  if (data === null || typeof data !== "object" || Array.isArray(data))
    return `has data that is not a JSON object: ${quoted}`;
  return { id: raw.id ?? "", type: raw.type, data } as FleetEvent;
}

/**
 * The error an event the client cannot read rejects the iteration with: a FleetApiError
 * `invalid_response` naming the event and where to read on. The event is not skipped in
 * silence (it was: its JSON.parse failed like a broken connection, and the reconnect with its
 * id went on after it), so a caller never loses an event without knowing.
 */
function unreadableEvent(
  path: string,
  status: number,
  raw: { id?: string; type?: string },
  problem: string,
): FleetApiError {
  const { id, type } = raw;
  const which = `${id === undefined ? "an event without an id" : `event ${id}`}${type === undefined ? "" : ` (${type})`}`;
  const next =
    id === undefined ? "" : `; to read on after it, iterate again with { after: ${JSON.stringify(id)} }`;
  return new FleetApiError(
    status,
    "invalid_response",
    `GET ${path}: ${which} ${problem}${next}`,
    undefined,
    undefined,
    undefined,
    undefined,
    id,
  );
}

/**
 * A wait of EventsOptions in ms (waitMs): as `maxReconnectDelayMs` a NaN made every wait
 * between reconnects `setTimeout(NaN)`, 1 ms, and an API answering 502 was asked again hundreds
 * of times a second, for ever; as `idleTimeoutMs` it turned the watch of a silent connection off
 * without a word.
 */
function waitOption(
  options: EventsOptions,
  name: "maxReconnectDelayMs" | "idleTimeoutMs",
  fallback: number,
): number {
  return waitMs("events()", name, options[name], fallback);
}

/**
 * The events at `path` (a session's or a batch's), reconnecting with the last id after a
 * dropped connection, an unreachable API, a 429 or a 5xx (`events()`, `batchEvents()`).
 */
export async function* eventStream(
  http: ApiTransport,
  path: string,
  options: EventsOptions,
): AsyncGenerator<FleetEvent> {
  let last = options.after;
  let delay = 250;
  let answered = false;
  const maxDelay = waitOption(options, "maxReconnectDelayMs", 5_000);
  const outer = options.signal;
  const idleMs = waitOption(options, "idleTimeoutMs", DEFAULT_IDLE_TIMEOUT_MS);
  while (!outer?.aborted) {
    const controller = new AbortController();
    const onAbort = () => controller.abort(outer?.reason);
    outer?.addEventListener("abort", onAbort, { once: true });
    // Nothing read for idleMs: the connection is taken as broken (its read rejects with this).
    let idle: ReturnType<typeof setTimeout> | undefined;
    let silent = false;
    const watch = () => {
      clearTimeout(idle);
      if (idleMs > 0 && idleMs <= MAX_TIMER_MS)
        idle = setTimeout(() => {
          silent = true;
          controller.abort(
            new Error(
              `GET ${path}: the connection brought nothing for ${idleMs} ms (no event, no heartbeat); reconnecting`,
            ),
          );
        }, idleMs);
    };
    async function* watched(chunks: AsyncIterable<Uint8Array>): AsyncGenerator<Uint8Array> {
      for await (const chunk of chunks) {
        watch();
        yield chunk;
      }
    }
    watch();
    try {
      let response: Response;
      try {
        const headers = http.headers(undefined, {});
        headers.accept = "text/event-stream";
        if (last !== undefined) headers["last-event-id"] = last;
        response = await http.send("GET", path, { headers, signal: controller.signal });
      } catch (error) {
        if (outer?.aborted) return;
        // A connection taken and never answered (an API whose event loop is stuck, a proxy
        // holding the request) found an API: it is tried again as a later drop is, whether the
        // idle timeout or fetch's headers timeout (the `fleet` commands': a minute) gave up on
        // it. Thrown, the idle timeout's "…; reconnecting" ended `fleet watch` (exit 1).
        const taken = silent || (error as { code?: unknown } | null)?.code === "UND_ERR_HEADERS_TIMEOUT";
        if (options.failIfUnreachable && !answered && !taken) throw error;
        // The API is unreachable for now (or did not answer within idleMs): try again.
        options.onRetry?.(error);
        await sleep(delay, outer);
        delay = Math.min(maxDelay, delay * 2);
        continue;
      }
      answered = true;
      // 204 No Content: the stream has nothing more for this reader, ever (a batch's stream
      // resumed after its BATCH_COMPLETED); an event-stream client stops reconnecting.
      if (response.status === 204) return;
      if (!response.ok || !response.body) {
        const error = apiError("GET", path, response, parseJson(await response.text().catch(() => "")));
        // Over a limit, or the API is unwell: wait and reconnect; other answers are final.
        if (response.status !== 429 && response.status < 500) throw error;
        options.onRetry?.(error);
        await sleep(Math.max(delay, (error.retryAfter ?? 0) * 1000), outer);
        delay = Math.min(maxDelay, delay * 2);
        continue;
      }
      // A 2xx that is no event stream (a captive portal's or a web app's page, JSON of another
      // service) holds no event: read as one, it ended without any and was asked again for ever.
      const type = response.headers.get("content-type");
      if (type !== null && !/^text\/event-stream\s*(;|$)/i.test(type)) {
        const body = await http.text("GET", path, response, controller.signal).catch(() => "");
        throw new FleetApiError(
          response.status,
          "invalid_response",
          `GET ${path}: HTTP ${response.status} with content-type ${type}, not text/event-stream: ${quotedStart(body)}`,
        );
      }
      let unreadable: FleetApiError | undefined;
      try {
        for await (const raw of parseSse(watched(http.chunks("GET", path, response, controller.signal)))) {
          delay = 250;
          const event = readEvent(raw);
          if (typeof event === "string") {
            unreadable = unreadableEvent(path, response.status, raw, event);
            break;
          }
          if (raw.id !== undefined) last = raw.id;
          // The caller's time with the event is not the connection's silence.
          clearTimeout(idle);
          yield event;
          watch();
          // The session (or batch) was deleted: nothing follows, and a reconnect would get 404.
          if (event.type === "SESSION_DELETED" || event.type === "BATCH_DELETED") return;
        }
      } catch (error) {
        if (outer?.aborted) return;
        // The connection broke: reconnect with the last id.
        options.onRetry?.(error);
      }
      if (unreadable) throw unreadable;
      await sleep(delay, outer);
      delay = Math.min(maxDelay, delay * 2);
    } finally {
      clearTimeout(idle);
      outer?.removeEventListener("abort", onAbort);
      controller.abort();
    }
  }
}
