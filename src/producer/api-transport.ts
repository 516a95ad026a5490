/**
 * How the client sends a request: the base URL and key, JSON in and out, a non-2xx answer as
 * a FleetApiError, no answer as a FleetNetworkError, and a 429 sent again after its
 * Retry-After (never another error: a POST that met a 503 or a broken connection may have
 * been done).
 */
import { BODY_LIMIT } from "../shared/body-limit.js";
import { checkedBaseUrl } from "./base-url.js";
import { apiError, FleetApiError, networkError, parseJson } from "./client-errors.js";
import type { PostOptions } from "./client-options.js";

/** How long the client waits in all for 429s of one call before giving the error back. */
const DEFAULT_MAX_LIMIT_WAIT_MS = 30_000;

/** What a request to the API is: method, path, JSON body, post options (default none), abort signal. */
export type RequestArgs = [
  method: string,
  path: string,
  body?: unknown,
  options?: PostOptions,
  signal?: AbortSignal,
];

/**
 * The key as it is sent (pure): without surrounding whitespace (a key read from a file with its
 * newline; fetch dropped it too), and only visible ASCII, the one token `Authorization: Bearer
 * KEY` carries. Anything else is a TypeError that never repeats the key: fetch's own quoted the
 * whole header, key and all, at the first call. Empty or absent: no key.
 */
export function checkedApiKey(apiKey: string | undefined): string | undefined {
  if (!apiKey) return undefined;
  const key = apiKey.replace(/^[ \t\r\n]+|[ \t\r\n]+$/g, "");
  const bad = key.search(/[^\x21-\x7e]/);
  if (key === "" || bad >= 0)
    throw new TypeError(
      key === ""
        ? "FleetClient: apiKey is only blanks; pass a key from `fleet keys create`, or none"
        : `FleetClient: apiKey must be visible ASCII characters, as a key from \`fleet keys create\` is; character ${bad + 1} is not (a space, a line break, a control or non-ASCII character)`,
    );
  return key;
}

export class ApiTransport {
  readonly baseUrl: string;
  private readonly apiKey: string | undefined;
  private readonly maxLimitWaitMs: number;

  constructor(options: { baseUrl: string; apiKey?: string; maxLimitWaitMs?: number }) {
    this.baseUrl = checkedBaseUrl(options.baseUrl);
    this.apiKey = checkedApiKey(options.apiKey);
    this.maxLimitWaitMs = waitMs(
      "FleetClient",
      "maxLimitWaitMs",
      options.maxLimitWaitMs,
      DEFAULT_MAX_LIMIT_WAIT_MS,
    );
  }

  request<T>(...args: RequestArgs): Promise<T> {
    return this.waitingOutLimits(() => this.requestOnce<T>(...args), args[4]);
  }

  /**
   * `call`, sent again after each 429's Retry-After until maxLimitWaitMs was spent waiting;
   * `signal` ends the wait (rejecting with its reason).
   */
  async waitingOutLimits<T>(call: () => Promise<T>, signal?: AbortSignal): Promise<T> {
    let waited = 0;
    for (;;) {
      try {
        return await call();
      } catch (error) {
        // Only a 429 is sent again: a POST that met a 503 may have been done (no key to tell).
        const after = error instanceof FleetApiError && error.status === 429 ? error.retryAfter : undefined;
        if (after === undefined || waited + after * 1000 > this.maxLimitWaitMs) throw error;
        await sleep(after * 1000, signal);
        signal?.throwIfAborted();
        waited += after * 1000;
      }
    }
  }

  headers(body: unknown, options: PostOptions): Record<string, string> {
    const headers: Record<string, string> = {};
    if (body !== undefined) headers["content-type"] = "application/json";
    if (this.apiKey !== undefined) headers.authorization = `Bearer ${this.apiKey}`;
    if (options.idempotencyKey !== undefined) headers["idempotency-key"] = options.idempotencyKey;
    return headers;
  }

  /** `fetch` of `path`; a network failure rejects with a FleetNetworkError (an abort with the signal's reason). */
  async send(method: string, path: string, init: RequestInit): Promise<Response> {
    const url = `${this.baseUrl}${path}`;
    // fetch follows a 301, 302 or 303 of a POST as a GET of the new URL (and a 307 or 308
    // cross-origin without the Authorization header): a createSession behind an http → https
    // redirect resolved with the answer of `GET /v1/sessions`, creating nothing. Only reads
    // follow a redirect; any other method's 3xx is a FleetApiError naming where it leads.
    const reading = method === "GET" || method === "HEAD";
    let response: Response;
    try {
      response = await fetch(url, { ...init, method, redirect: reading ? "follow" : "manual" });
    } catch (error) {
      throw networkError(error, method, url, init.signal);
    }
    if (reading || response.status < 300 || response.status > 399) return response;
    await response.body?.cancel().catch(() => {});
    const location = response.headers.get("location");
    const to =
      location === null
        ? ""
        : ` to ${URL.canParse(location, url) ? new URL(location, url).href : JSON.stringify(location)}`;
    throw new FleetApiError(
      response.status,
      "redirected",
      `${method} ${path}: HTTP ${response.status} redirected${to}; the client does not follow a redirect of a ${method} (fetch would send it on as a GET, or without its key): set baseUrl to the API's own URL`,
    );
  }

  /** The answer's body; a connection that breaks meanwhile rejects with a FleetNetworkError. */
  async text(method: string, path: string, response: Response, signal?: AbortSignal): Promise<string> {
    try {
      return await response.text();
    } catch (error) {
      throw networkError(error, method, `${this.baseUrl}${path}`, signal, true);
    }
  }

  /** The answer's body chunk by chunk, as `text` reports a connection that breaks. */
  async *chunks(
    method: string,
    path: string,
    response: Response,
    signal?: AbortSignal,
  ): AsyncGenerator<Uint8Array> {
    if (!response.body) return;
    try {
      yield* response.body as AsyncIterable<Uint8Array>;
    } catch (error) {
      throw networkError(error, method, `${this.baseUrl}${path}`, signal, true);
    }
  }

  private async requestOnce<T>(...[method, path, body, options = {}, signal]: RequestArgs): Promise<T> {
    const json = body === undefined ? undefined : JSON.stringify(body);
    // The API's 413, without sending it: the API answers a bigger body before it has read it and
    // closes the connection, so the call rejected now with that 413, now with `write EPIPE`
    // (a FleetNetworkError: maybe done, send it again) while the body was still going out.
    if (json !== undefined && json.length > BODY_LIMIT / 3 && Buffer.byteLength(json) > BODY_LIMIT)
      throw new FleetApiError(
        413,
        "invalid_request",
        `${method} ${path}: the body is larger than ${BODY_LIMIT / 1024 / 1024} MiB (nothing was sent)`,
      );
    const response = await this.send(method, path, {
      headers: this.headers(body, options),
      body: json,
      signal,
    });
    const text = await this.text(method, path, response, signal);
    const answer = parseJson(text);
    if (!response.ok) throw apiError(method, path, response, answer);
    // An empty 2xx body is refused too (the API answers every route with JSON; 204 and 205 say
    // they have none): taken as undefined, the caller failed on it with a TypeError of its own
    // ("cannot read properties of undefined") far from the answer of a proxy that sent it.
    if (answer === undefined && (text !== "" || (response.status !== 204 && response.status !== 205)))
      throw new FleetApiError(
        response.status,
        "invalid_response",
        `${method} ${path}: HTTP ${response.status} with ${text === "" ? "an empty body" : "a body that is not JSON"}`,
      );
    return answer as T;
  }
}

/**
 * A wait option in ms (pure): `fallback` when absent, else a number ≥ 0 (Infinity too). A NaN
 * (a `Number()` of a variable left unset) or a negative one throws a TypeError naming it and
 * `where` it was given: as a delay, setTimeout takes it for 1 ms (a retry or poll loop); as a
 * bound, nothing is more than NaN (a wait for ever).
 */
export function waitMs(where: string, name: string, value: unknown, fallback: number): number {
  if (value === undefined) return fallback;
  if (typeof value !== "number" || Number.isNaN(value) || value < 0)
    throw new TypeError(`${where}: ${name} must be a number of milliseconds ≥ 0, not ${String(value)}`);
  return value;
}

/** The longest delay setTimeout takes (2^31-1 ms, about 24.8 days): a longer one fires after 1 ms. */
export const MAX_TIMER_MS = 2 ** 31 - 1;

/** Resolves after `ms`, or at once when `signal` aborts (the caller checks which). */
export function sleep(ms: number, signal?: AbortSignal): Promise<void> {
  return new Promise((resolve) => {
    if (signal?.aborted) return resolve();
    // At most the longest timer: a Retry-After of months waited 1 ms, and a stream asked
    // again at once, again and again.
    const timer = setTimeout(done, Math.min(ms, MAX_TIMER_MS));
    function done() {
      clearTimeout(timer);
      signal?.removeEventListener("abort", done);
      resolve();
    }
    signal?.addEventListener("abort", done, { once: true });
  });
}
