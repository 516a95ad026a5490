/**
 * The client's errors: FleetApiError, an answer of the API other than 2xx (with what its body
 * says), and how one is made from an answer.
 */

/** An answer of the API other than 2xx; `reason` is set on 409 (nothing to resume). */
export class FleetApiError extends Error {
  override name = "FleetApiError";
  constructor(
    readonly status: number,
    readonly code: string,
    message: string,
    readonly reason?: string,
    readonly field?: string,
    /**
     * On 429, and on a 503 that carries Retry-After (Postgres or Redis away): the seconds the
     * API asked to wait. The client waits out 429s itself (`maxLimitWaitMs`), never 503s.
     */
    readonly retryAfter?: number,
    /** On 429: which tenant limit (`active_sessions`, `request_rate`, `event_streams`). */
    readonly limit?: string,
  ) {
    super(message);
  }
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

/** Whether `error` is an API's 400 for a query parameter it does not know (an older release). */
export function refusesParameter(error: unknown, name: string): boolean {
  return error instanceof FleetApiError && error.status === 400 && error.field === name;
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
    response.status === 429 || (response.status === 503 && response.headers.has("retry-after"))
      ? Math.max(1, Number(response.headers.get("retry-after")) || 1)
      : undefined,
    error.limit,
  );
}
