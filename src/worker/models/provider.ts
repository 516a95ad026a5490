/**
 * The model provider interface, shaped for real providers: a request streams events (text
 * deltas, complete tool calls, a final stop reason with usage) and honours an AbortSignal.
 * A stream that ends without `done` broke: the runtime records it as `interrupted`.
 */
import { clippedError } from "../../shared/failure-text.js";
import type { Message, ProviderState, ToolCall, Usage } from "../../shared/messages.js";
import type { ModelPrice } from "../../shared/prices.js";

export type ToolSpec = {
  name: string;
  description: string;
  /** JSON Schema of the arguments object. */
  parameters: Record<string, unknown>;
};

export type ModelRequest = {
  sessionId: string;
  system?: string;
  history: readonly Message[];
  tools: readonly ToolSpec[];
  signal: AbortSignal;
  /**
   * Called by a provider whenever its server sent something, events or not (a `ping`, a
   * keep-alive comment): the stream is not idle (model-attempt.ts; body-liveness.ts).
   */
  alive?: () => void;
};

export type ModelEvent =
  | { type: "text"; delta: string }
  | { type: "tool_call"; call: ToolCall }
  /**
   * Output that reaches the caller only later, as part of a `tool_call` (a call's streamed
   * name and arguments) or of the step's `providerState` (Anthropic thinking, its signatures
   * and redacted thinking, Responses reasoning items: `kept`), or not at all (the reasoning a
   * compatible server streams): `chars` characters of it arrived. It shows the stream is alive
   * (the idle limit) and counts toward the output bound as it arrives (model-attempt.ts), so a
   * long call is neither cut as idle nor read without bound. `kept` chars count for the whole
   * step; the others until the next whole call, which counts its own characters then.
   */
  | { type: "progress"; chars: number; kept?: true }
  /**
   * Usage the provider reported before the step is whole (Anthropic's `message_start` and
   * `message_delta`, OpenAI's usage chunk before `[DONE]`): what it bills so far. Only a step
   * cut short uses it, so that `agent.budget` counts at least that (call-model.ts); a whole
   * step's usage is its `done` event's.
   */
  | { type: "usage"; usage: Usage }
  /**
   * `stopReason` is already normalised (stop-reasons.ts); unknown values verbatim. `usage`:
   * what the provider reported; `null` when a real provider reported none (unknown — never
   * 0 tokens); absent for a model that has no notion of tokens (scripted).
   */
  | {
      type: "done";
      stopReason: string;
      usage?: Usage | null;
      /** The provider's blocks to replay with the history (provider-state.ts); only on a whole step. */
      providerState?: ProviderState;
    };

/** What a provider calls, for prices and the token metric. */
export type ModelIdentity = {
  provider: "openai" | "anthropic";
  model: string;
  /** Its FLEET_PRICES entry (prices.ts), set by create-model.ts; absent: no price. */
  price?: ModelPrice;
};

export interface ModelProvider {
  stream(request: ModelRequest): AsyncIterable<ModelEvent>;
  /** Absent for a model without tokens (scripted). */
  readonly identity?: ModelIdentity;
}

/**
 * The key a provider sends, as create-model.ts decided from the model's route (contracts.md
 * §11). The provider never looks for one itself, and its SDK is not allowed to either.
 */
export type ProviderKey = {
  /** The key to send. */
  apiKey?: string;
  /**
   * No key is wanted (a raw `baseUrl`, or an endpoint declared without `apiKeyEnv`): a
   * placeholder is sent, since the SDKs insist on one.
   */
  keyless?: boolean;
  /** Why a wanted key is missing; the request fails with it (non-retryable) and nothing is sent. */
  missingKey?: string;
};

/** Sent when no key is wanted: servers that need none ignore it, and it is no secret. */
export const PLACEHOLDER_KEY = "no-key";

/** The key to send, or the ProviderError saying why there is none. */
export function keyToSend(key: ProviderKey, missingDefault: string): string {
  if (key.apiKey) return key.apiKey;
  if (key.keyless) return PLACEHOLDER_KEY;
  throw new ProviderError(key.missingKey ?? missingDefault, false);
}

/** Where a failed request went and what came back: fields for logs, never a key. */
export type ProviderErrorInfo = {
  provider?: "openai" | "anthropic";
  /** The HTTP status of the answer, when there was one (not for an error inside a stream). */
  status?: number;
  /** The error's type or code as the provider sent it (`authentication_error`, `invalid_api_key`). */
  type?: string;
  /** The declared endpoint (FLEET_MODEL_ENDPOINTS) the MODEL named, if any. */
  endpoint?: string;
  /** `host[:port]` of the base URL the request went to. */
  host?: string;
};

/**
 * A failed model request. `retryable` says whether the same request may succeed later
 * (connection errors, 429, 5xx); the runtime retries only while no output has arrived.
 * The message never carries a key (providers scrub it: scrub-secrets.ts).
 */
export class ProviderError extends Error {
  override name = "ProviderError";
  constructor(
    message: string,
    readonly retryable: boolean,
    readonly retryAfterMs?: number,
    readonly info: ProviderErrorInfo = {},
  ) {
    super(message);
  }
}

/** What a provider adds to its errors besides the message: a hint to wait, a status, a type. */
export type ProviderErrorExtra = { retryAfterMs?: number; status?: number; type?: string };

/** A ProviderError with the message scrubbed (`redact`), then clipped, and the provider's `info` merged in. */
export function providerError(
  message: string,
  retryable: boolean,
  extra: ProviderErrorExtra,
  info: ProviderErrorInfo,
  redact: (text: string) => string,
): ProviderError {
  const { retryAfterMs, ...more } = extra;
  return new ProviderError(clippedError(redact(message)), retryable, retryAfterMs, { ...info, ...more });
}

/** A provider's `fail`: providerError with its route's info and key scrubbing (openai-errors.ts, anthropic-errors.ts). */
export type ProviderFail = (message: string, retryable: boolean, extra?: ProviderErrorExtra) => ProviderError;

/** Whether an HTTP status is worth retrying: 408, 409, 429 and 5xx. */
export function retryableStatus(status: number): boolean {
  return status === 408 || status === 409 || status === 429 || status >= 500;
}

/**
 * Error types and codes meaning the request itself is refused (the 400/401/403/404-like
 * answers): sent again, it would be refused again. Compared lower-case, `-`/space as `_`.
 * Both providers' names and those of compatible servers (vLLM's `BadRequestError`, ...).
 */
const PERMANENT_ERROR_KINDS = new Set([
  "invalid_request_error",
  "invalid_request",
  "bad_request",
  "badrequesterror",
  "authentication_error",
  "authenticationerror",
  "unauthorized",
  "invalid_api_key",
  "incorrect_api_key",
  "permission_error",
  "permission_denied",
  "permissiondeniederror",
  "forbidden",
  "insufficient_permissions",
  "not_found_error",
  "not_found",
  "notfounderror",
  "model_not_found",
  "billing_error",
  "insufficient_quota",
  "invalid_value",
  "unprocessable_entity",
  "unprocessableentityerror",
  // The Responses API's `response.failed` codes that refuse the request itself (the SDK's
  // ResponseError): a flagged prompt, a policy, a residency rule, an image it cannot take.
  // Its transient ones (`server_error`, `rate_limit_exceeded`, `vector_store_timeout`,
  // `failed_to_download_image`) are retried.
  "invalid_prompt",
  "bio_policy",
  "data_residency_mismatch",
  "invalid_image",
  "invalid_image_format",
  "invalid_base64_image",
  "invalid_image_url",
  "image_too_large",
  "image_too_small",
  "image_parse_error",
  "image_content_policy_violation",
  "invalid_image_mode",
  "image_file_too_large",
  "unsupported_image_media_type",
  "empty_image_file",
  "image_file_not_found",
]);

/** An HTTP status given as a number or a string of digits, if it is one. */
function statusLike(value: unknown): number | undefined {
  const n =
    typeof value === "number" ? value : typeof value === "string" && /^\d{3}$/.test(value) ? +value : NaN;
  return Number.isInteger(n) && n >= 100 && n <= 599 ? n : undefined;
}

/**
 * Whether an error sent inside a stream (OpenAI `data: {"error": {...}}`, Anthropic
 * `event: error`) is worth retrying, judged like the same error answered over HTTP: an
 * HTTP-like status in it (`status`, or a numeric `code` as vLLM sends) decides as
 * `retryableStatus` does; else a type or code of the refused-request kind
 * (PERMANENT_ERROR_KINDS: invalid request, authentication, permission, not found, billing)
 * is not retried; anything else (overloaded, rate limit, server error, unknown) is.
 */
export function streamErrorRetryable(error: { status?: unknown; code?: unknown; type?: unknown }): boolean {
  const status = statusLike(error.status) ?? statusLike(error.code);
  if (status !== undefined) return httpErrorRetryable(status, error);
  return !refusedKind(error);
}

/**
 * Whether an HTTP error answer is worth retrying. The server's `x-should-retry: true|false`
 * (`headers`: the answer's) decides first, as both SDKs' `shouldRetry` decide: `false` on a
 * 429/5xx is final, `true` on a 400 is asked again (within the call's attempts and budget,
 * call-model.ts). Else `retryableStatus`. A 429 of the refused kind — OpenAI's
 * `insufficient_quota`, an account out of credit — is final whatever the header says: no wait
 * ends it (on a declared endpoint every 429 would otherwise be waited out for ever, §15).
 */
export function httpErrorRetryable(
  status: number,
  error: { code?: unknown; type?: unknown },
  headers?: Headers,
): boolean {
  if (status === 429 && refusedKind(error, QUOTA_ERROR_KINDS)) return false;
  const said = headers?.get("x-should-retry");
  if (said === "true" || said === "false") return said === "true";
  return retryableStatus(status);
}

/**
 * The kinds of a 429 that no wait ends. Only these: servers that speak OpenAI's API also send
 * plain rate limits as 429 with another type (`invalid_request_error`, say), and those pass.
 */
const QUOTA_ERROR_KINDS = new Set(["insufficient_quota"]);

/** Whether a type or code says the request itself is refused (one of `kinds`). */
function refusedKind(
  error: { code?: unknown; type?: unknown },
  kinds: ReadonlySet<string> = PERMANENT_ERROR_KINDS,
): boolean {
  return [error.type, error.code].some(
    (kind) =>
      typeof kind === "string" &&
      kinds.has(
        kind
          .trim()
          .toLowerCase()
          .replace(/[\s-]+/g, "_"),
      ),
  );
}

/**
 * An HTTP-date as RFC 9110 §5.6.7 writes one (IMF-fixdate, and the obsolete RFC 850 and asctime
 * forms): each starts with a day name. V8's Date.parse reads far more ("5, 10", "-5" and "+5"
 * are days of 2001 to it), which turned a header sent twice or a signed number into a date in
 * the past: a wait of 0, the request asked again at once.
 */
const HTTP_DATE = /^(Mon|Tue|Wed|Thu|Fri|Sat|Sun)[a-z]*,? /;

/**
 * Milliseconds a `retry-after-ms` or `retry-after` (seconds or an HTTP date) header asks for.
 * A header a proxy sent twice reaches us joined ("5, 10"): its first value counts. Anything
 * else is no hint (the caller's own backoff applies).
 */
export function retryAfterMs(headers: Headers | undefined, now = Date.now()): number | undefined {
  const ms = Number.parseFloat(headers?.get("retry-after-ms") ?? "");
  if (Number.isFinite(ms) && ms >= 0) return Math.round(ms);
  const value = headers?.get("retry-after")?.trim();
  if (!value) return undefined;
  const seconds = /^(\d+(\.\d+)?)\s*(,|$)/.exec(value);
  if (seconds) return Math.round(Number.parseFloat(seconds[1]!) * 1000);
  if (!HTTP_DATE.test(value)) return undefined;
  const date = Date.parse(value);
  return Number.isNaN(date) ? undefined : Math.max(0, date - now);
}
