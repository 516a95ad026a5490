/**
 * The client's errors: FleetApiError, an answer of the API other than 2xx (with what its body
 * says), and FleetNetworkError, a call that got no whole answer; and how each is made.
 */

/**
 * An answer of the API other than 2xx (`reason` is set on 409: nothing to resume), or a 2xx the
 * client cannot read (`code: "invalid_response"`: an empty or non-JSON body, an event whose
 * data is not a JSON object), or a redirect of a POST, PATCH or DELETE, which the client does
 * not follow (`code: "redirected"`, the 3xx's status).
 */
export class FleetApiError extends Error {
  override name = "FleetApiError";
  constructor(
    readonly status: number,
    readonly code: string,
    message: string,
    readonly reason?: string,
    readonly field?: string,
    /**
     * On 429, and on a 5xx that carries Retry-After (a 503: Postgres or Redis away): the
     * seconds the API asked to wait (on a 5xx as sent, 0 too). The client waits out 429s itself (`maxLimitWaitMs`), never 503s.
     */
    readonly retryAfter?: number,
    /** On 429: which limit (`active_sessions`, `request_rate`, `event_streams`, `auth_failures`, `queued_runs`, `big_bodies`, `big_answers`, `results_reads`). */
    readonly limit?: string,
    /**
     * On an `invalid_response` of an event stream: the id of the event that could not be read
     * (`events(sessionId, { after: eventId })` reads on after it).
     */
    readonly eventId?: string,
  ) {
    super(message);
  }
}

/**
 * A call that got no whole answer from the API: nothing listens at the URL (`code`
 * `ECONNREFUSED`), its host name does not resolve (`ENOTFOUND`, `EAI_AGAIN`), the connection
 * broke before the answer was complete (`UND_ERR_SOCKET`, `ECONNRESET`), or the base URL is
 * not a URL. Whether a POST or DELETE was done is not known then: send it again only with
 * the same `idempotencyKey`; the client itself never sends a call again after one. A
 * `TypeError`, as what `fetch` rejected with before, so code that caught that still does;
 * never a FleetApiError, whose `status` is always the API's.
 */
export class FleetNetworkError extends TypeError {
  override name = "FleetNetworkError";
  /** The cause's code (`ECONNREFUSED`, `ENOTFOUND`, `UND_ERR_SOCKET`, …) when it has one. */
  readonly code: string | undefined;

  constructor(
    /** The call's method (`GET`, `POST`, …). */
    readonly method: string,
    /** The URL it was sent to. */
    readonly url: string,
    /** What `fetch` rejected with (its `cause`, the system's error, becomes this one's). */
    error: TypeError,
    /** Whether the answer had begun: it broke while being read. */
    readonly reading = false,
  ) {
    const cause = error.cause ?? error;
    const detail = tlsDetail(cause) ?? messageOf(cause) ?? error.message;
    super(`${method} ${url} failed${reading ? " while reading the answer" : ""}: ${detail}`, { cause });
    this.code = codeOf(cause);
  }
}

/**
 * What a `fetch` of `url`, or reading its answer, rejected with, as the call should reject: a
 * network failure as a FleetNetworkError; an abort (the signal's reason) and anything else
 * as it is.
 */
export function networkError(
  error: unknown,
  method: string,
  url: string,
  signal?: AbortSignal | null,
  reading = false,
): unknown {
  if (signal?.aborted || !(error instanceof TypeError) || error instanceof FleetNetworkError) return error;
  // undici says "fetch failed" for a request that met the network, and fails a body being read
  // ("terminated"); a TypeError before anything was sent (a header value it cannot send, an API
  // key with a character outside Latin-1) is the caller's, and nothing may have been done.
  if (!reading && error.message !== "fetch failed") return error;
  return new FleetNetworkError(method, url, error, reading);
}

// Of an AggregateError (several addresses tried, IPv6 and IPv4), its first error's.
function codeOf(error: unknown): string | undefined {
  const { code, errors } = error as { code?: unknown; errors?: unknown[] };
  if (typeof code === "string") return code;
  return Array.isArray(errors) && errors.length > 0 ? codeOf(errors[0]) : undefined;
}

/**
 * An OpenSSL error by its reason: its message is OpenSSL's raw line (`80EC…:error:0A00010B:SSL
 * routines:ssl3_get_record:wrong version number:../deps/openssl/…:350:` and a line break), which
 * a `fleet` command printed as it was. The usual mistake is named: https:// to a server that
 * speaks plain HTTP, as `fleet api` does.
 */
function tlsDetail(error: unknown): string | undefined {
  const { code, reason } = (error ?? {}) as { code?: unknown; reason?: unknown };
  if (typeof code !== "string" || !code.startsWith("ERR_SSL_") || typeof reason !== "string")
    return undefined;
  return code === "ERR_SSL_WRONG_VERSION_NUMBER"
    ? `TLS: ${reason} (the server does not answer in TLS: is the URL http://, not https://?)`
    : `TLS: ${reason}`;
}

function messageOf(error: unknown): string | undefined {
  if (error instanceof Error && error.message) return error.message;
  const { errors } = error as { errors?: unknown[] };
  return Array.isArray(errors) && errors.length > 0 ? messageOf(errors[0]) : undefined;
}

/**
 * An answer's body as JSON; undefined when it is empty or not JSON — the HTML page a proxy or
 * load balancer answers with (502, 504) is an HTTP error, not a SyntaxError of the client.
 */
export function parseJson(text: string): unknown {
  if (!text) return undefined;
  try {
    return JSON.parse(text);
  } catch {
    return undefined;
  }
}

/** The start of a text a message quotes, JSON-quoted: at most `max` characters of it, then `…`. */
export function quotedStart(text: string, max = 80): string {
  return JSON.stringify(text.length > max ? `${text.slice(0, max)}…` : text);
}

/** Whether `error` is an API's 400 for a query parameter it does not know (an older release). */
export function refusesParameter(error: unknown, name: string): boolean {
  return error instanceof FleetApiError && error.status === 400 && error.field === name;
}

/**
 * The seconds a 429 or a 5xx asks to wait (Retry-After), undefined when a 5xx has none. A
 * 429's is at least 1 (the client waits it out itself). A 5xx's is kept as sent — `0` too,
 * and fractions — for `fleet batch submit` to bound (src/commands/batch-send.ts); one that is
 * not a number of seconds (an HTTP date) reads as 1. Before, only a 503's was read, and a
 * `Retry-After: 0` read as 1.
 */
function retryAfterOf(response: Response): number | undefined {
  const header = response.headers.get("retry-after");
  if (response.status === 429) return Math.max(1, Number(header) || 1);
  if (response.status < 500 || header === null) return undefined;
  const seconds = header.trim() === "" ? Number.NaN : Number(header);
  return Number.isFinite(seconds) && seconds >= 0 ? seconds : 1;
}

/** The FleetApiError of a non-2xx answer. */
export function apiError(method: string, path: string, response: Response, json: unknown): FleetApiError {
  const error = (json as { error?: Record<string, string | undefined> } | undefined)?.error ?? {};
  return new FleetApiError(
    response.status,
    error.code ?? "http_error",
    error.message ??
      `${method} ${path}: HTTP ${response.status}${response.statusText ? ` ${response.statusText}` : ""}`,
    error.reason,
    error.field,
    retryAfterOf(response),
    error.limit,
  );
}
