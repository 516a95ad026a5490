/**
 * What the SDK clients may send, and where (issue "Trust boundaries"; contracts §11). Both
 * providers build their client with these, so that a key goes only to the base URL its
 * route names:
 *
 * - Redirects are never followed (`guardedFetch`). fetch's own rule on a cross-origin
 *   redirect strips `Authorization` only — not `x-api-key`, not a custom header — and a
 *   redirect to the same host may still change scheme or port. So every request is sent with
 *   `redirect: "manual"`, and a 3xx answer fails the request, non-retryably, naming the
 *   status and the origin of its `Location` (never its path or query). Nothing is sent to
 *   that origin. The operator gives the final URL as the `baseUrl` instead.
 * - A client sends only to its base URL's origin: a request for another origin fails the
 *   same way, before anything is sent.
 * - Headers from the environment (`OPENAI_CUSTOM_HEADERS`, `ANTHROPIC_CUSTOM_HEADERS`, which
 *   the SDKs read by themselves and have no option to ignore) are cancelled by explicit
 *   `defaultHeaders` (`customHeaderOverrides`, `anthropicHeaderOverrides`): no value such a
 *   variable holds is sent. A header it names goes as the SDK sends it itself, or not at all:
 *   `Authorization` is exactly `Bearer <the route's key or the placeholder>`, Anthropic's
 *   `anthropic-version` the SDK's.
 * - A body reaches the SDK in whole lines, none longer than 64 MiB (sse-lines.ts); a `200` of
 *   JSON, where every request asks for an event stream, fails the request (json-answer.ts),
 *   and so does a `200` web page (page-answer.ts), a `200` of any other type but
 *   `text/event-stream`, and response headers past the client's size (odd-answers.ts). The
 *   SDK reads an error answer's body (4xx, 5xx) whole: it gets its first 64 KiB, the rest is
 *   not read (error-answer.ts).
 * - Host names are looked up off libuv's thread pool, within a time limit (`providerFetch`,
 *   dns-lookup.ts): a model host whose DNS never answers no longer holds the pool's threads.
 */
import { createRequire } from "node:module";
import type { Agent } from "undici";
import { boundedLookup } from "./dns-lookup.js";
import { boundedErrorAnswer } from "./error-answer.js";
import { isJsonAnswer, jsonAnswerError } from "./json-answer.js";
import { headersOverflowError, isHeadersOverflow, notStreamError, notStreamType } from "./odd-answers.js";
import { isPageAnswer, pageAnswerError } from "./page-answer.js";
import { ProviderError, type ProviderErrorInfo } from "./provider.js";
import { wholeLines } from "./sse-lines.js";

/** The SDKs' `fetch` option (both declare this type). */
export type Fetch = (input: string | URL | Request, init?: RequestInit) => Promise<Response>;

/** A header name as fetch (and the SDKs' header builder) accepts it. */
const HTTP_TOKEN = /^[!#$%&'*+\-.^_`|~0-9A-Za-z]+$/;

/** `host[:port]` of a base URL, for logs and error messages (a base URL carries no user info). */
export function hostOf(baseUrl: string): string {
  try {
    return new URL(baseUrl).host;
  } catch {
    return "(not a URL)";
  }
}

function originOf(url: string, base?: string): string | null {
  try {
    const origin = new URL(url, base).origin;
    return origin === "null" ? null : origin;
  } catch {
    return null;
  }
}

function urlOf(input: string | URL | Request): string {
  return typeof input === "string" ? input : input instanceof URL ? input.href : input.url;
}

/** The connections of every provider client of this process: one pool, as global fetch's. */
let providerAgent: Agent | undefined;

/**
 * undici's Agent, required from its own file at the first model request: the package's index
 * loads all of undici (fetch, WebSocket, caches), 95 files against 24, ~4 times the CPU.
 */
function newProviderAgent(): Agent {
  const UndiciAgent = createRequire(import.meta.url)("undici/lib/dispatcher/agent.js") as typeof Agent;
  return new UndiciAgent({ connect: { lookup: boundedLookup() } });
}

/**
 * Global fetch through a connection pool of its own whose DNS lookups go through c-ares within
 * DNS_LOOKUP_TIMEOUT_MS (dns-lookup.ts), not getaddrinfo on the thread pool. Node's fetch is
 * undici 6 too, which takes this Agent as its `dispatcher`.
 */
export const providerFetch: Fetch = (input, init) => {
  providerAgent ??= newProviderAgent();
  // `dispatcher` is Node's fetch's (undici's) option; DOM's RequestInit type does not name it.
  return fetch(input, { ...init, dispatcher: providerAgent } as RequestInit);
};

/**
 * The `fetch` a provider's SDK client uses: only to `baseUrl`'s origin, never following a
 * redirect. The errors it throws are ProviderErrors (non-retryable); the SDKs wrap them in
 * their connection error with the ProviderError as `cause` (see `refusedByTransport`).
 */
export function guardedFetch(baseUrl: string, info: ProviderErrorInfo, base: Fetch = providerFetch): Fetch {
  const allowed = originOf(baseUrl);
  const label = info.provider ?? "provider";
  return async (input, init) => {
    const url = urlOf(input);
    const origin = originOf(url);
    if (origin === null || origin !== allowed)
      throw new ProviderError(
        `${label}: refusing to send a request to ${origin ?? "an unparsable URL"}: this model's requests go only to ${allowed}`,
        false,
        undefined,
        info,
      );
    let response: Response;
    try {
      response = await base(input, { ...init, redirect: "manual" });
    } catch (error) {
      // Headers past the client's size: the same server sends them again (odd-answers.ts).
      if (isHeadersOverflow(error)) throw headersOverflowError(info);
      throw error;
    }
    if (response.type === "opaqueredirect" || (response.status >= 300 && response.status < 400)) {
      await response.body?.cancel().catch(() => {});
      const location = response.headers.get("location");
      const target = location === null ? null : originOf(location, url);
      const where =
        location === null
          ? "without a Location"
          : target === null
            ? "to an unparsable Location"
            : target === allowed
              ? `to another path of ${target}`
              : `to ${target}`;
      const status = response.status || undefined;
      throw new ProviderError(
        `${label}: HTTP ${status ?? "3xx"} redirect ${where} refused: a worker never follows a redirect, so that no key goes anywhere but the configured base URL; give the final URL as the baseUrl`,
        false,
        undefined,
        { ...info, ...(status === undefined ? {} : { status }) },
      );
    }
    // An error answer: the SDK reads its body whole; it gets the first 64 KiB (error-answer.ts).
    if (response.status >= 400) return boundedErrorAnswer(response);
    // A JSON body where an event stream was asked: the server's error, or an answer that does
    // not stream — never read as a stream without events (json-answer.ts).
    if (isJsonAnswer(response)) throw await jsonAnswerError(response, info);
    // A web page: the base URL names a site, not its API (page-answer.ts).
    if (isPageAnswer(response)) throw await pageAnswerError(response, info);
    // Any other type but an event stream (text/plain): not read as one (odd-answers.ts).
    const type = notStreamType(response);
    if (type !== null) throw await notStreamError(response, type, info);
    // Whole lines to the SDK: its line splitting is quadratic in a line's length (sse-lines.ts).
    if (response.body === null) return response;
    return new Response(wholeLines(response.body, info), {
      status: response.status,
      statusText: response.statusText,
      headers: response.headers,
    });
  };
}

/** A transport error's status and type, for the provider's `fail` to carry again. */
export function transportExtra(error: ProviderError): { status?: number; type?: string } {
  const { status, type } = error.info;
  return { ...(status === undefined ? {} : { status }), ...(type === undefined ? {} : { type }) };
}

/** The ProviderError `guardedFetch` threw, if `error` (an SDK connection error) wraps one. */
export function refusedByTransport(error: unknown): ProviderError | undefined {
  const cause = (error as { cause?: unknown } | null)?.cause;
  return cause instanceof ProviderError ? cause : undefined;
}

/** The header names a `*_CUSTOM_HEADERS` value holds (`Name: value` lines, as the SDKs parse it), HTTP tokens only. */
function customHeaderNames(value: string | undefined): string[] {
  const names: string[] = [];
  for (const line of value?.trim().split("\n") ?? []) {
    const colon = line.indexOf(":");
    if (colon < 0) continue;
    const name = line.slice(0, colon).trim();
    if (HTTP_TOKEN.test(name)) names.push(name);
  }
  return names;
}

/**
 * `defaultHeaders` cancelling what OPENAI_CUSTOM_HEADERS in `env` would add (the SDK merges the
 * variable's headers under these): each name it holds maps to `null` (the header is not sent),
 * `Authorization` to `authorization` (what the SDK sends itself). Names the SDK would refuse
 * anyway (not an HTTP token) are left out: the SDK reports them.
 */
export function customHeaderOverrides(
  authorization: string,
  env: Readonly<Record<string, string | undefined>> = process.env,
): Record<string, string | null> {
  const overrides: Record<string, string | null> = {};
  for (const name of customHeaderNames(env.OPENAI_CUSTOM_HEADERS))
    overrides[name] = name.toLowerCase() === "authorization" ? authorization : null;
  return overrides;
}

/**
 * `defaultHeaders` cancelling what ANTHROPIC_CUSTOM_HEADERS in `env` would add: each name it
 * holds maps to `undefined`. That SDK spreads `defaultHeaders` over the variable's headers, so
 * the name's value is gone, and a header the SDK sends itself (`anthropic-version`, which the
 * API requires; `Authorization`, the route's key) keeps the SDK's own value — a `null` there
 * removed it from every request.
 */
export function anthropicHeaderOverrides(
  env: Readonly<Record<string, string | undefined>> = process.env,
): Record<string, undefined> {
  const overrides: Record<string, undefined> = {};
  for (const name of customHeaderNames(env.ANTHROPIC_CUSTOM_HEADERS)) overrides[name] = undefined;
  return overrides;
}
