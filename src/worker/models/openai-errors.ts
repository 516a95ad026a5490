/**
 * The OpenAI SDK's errors judged (used by openai.ts, for chat completions and the Responses
 * API alike).
 *
 * A request rejected for its context length is not an error but a response that stopped
 * with `context_full` (no text). 408/409/429/5xx and connection errors are retryable (with
 * the server's `retry-after-ms`/`retry-after`); other 4xx are not; an answer's
 * `x-should-retry: true|false` overrides the status (httpErrorRetryable). An error inside the stream
 * (`data: {"error": {...}}`) is judged the same way from its status, code or type
 * (`streamErrorRetryable`): an invalid key in a stream is not retried. A redirect is never
 * followed (transport.ts). No message carries a key: the route's key, the environment's keys
 * and anything shaped like one are scrubbed from the server's text (scrub-secrets.ts), by the
 * provider's `fail`.
 */
import { APIConnectionError, APIError, APIUserAbortError } from "openai";
import {
  httpErrorRetryable,
  ProviderError,
  type ProviderFail,
  retryAfterMs,
  streamErrorRetryable,
} from "./provider.js";
import { refusedByTransport, transportExtra } from "./transport.js";

export const CONTEXT_LENGTH_PATTERN =
  /context_length_exceeded|maximum context length|context length|context window|context size|too many tokens|prompt is too long|input is too long/i;

/** Whether an error says the request's prompt does not fit the model's context. */
export function isContextLengthError(error: unknown): boolean {
  if (!(error instanceof APIError) || error instanceof APIConnectionError) return false;
  const status = error.status;
  if (status !== undefined && status !== 400 && status !== 413 && status !== 422) return false;
  const body = error.error as { message?: unknown; code?: unknown; type?: unknown } | undefined;
  const text = [error.code, error.type, body?.code, body?.type, body?.message, error.message]
    .filter((v) => typeof v === "string")
    .join(" ");
  return CONTEXT_LENGTH_PATTERN.test(text);
}

/**
 * Whether a Responses request was refused for asking encrypted reasoning of a model that does
 * not reason (gpt-4o, gpt-4.1: 400 "Encrypted content is not supported with this model.",
 * `param: "include"`), or for sending it reasoning items (a history a reasoning model of the
 * same endpoint began: 400 "Reasoning input items can only be provided to a reasoning or
 * computer use model").
 */
export function refusesEncryptedReasoning(error: unknown): boolean {
  if (!(error instanceof APIError) || error instanceof APIConnectionError || error.status !== 400)
    return false;
  const body = error.error as { message?: unknown; param?: unknown } | undefined;
  const text = [body?.message, error.message].filter((v) => typeof v === "string").join(" ");
  return (
    /encrypted content is not supported|reasoning input items can only be provided/i.test(text) ||
    (body?.param === "include" && /encrypt/i.test(text))
  );
}

/** A ProviderError with the server's message (never a stack, never the key). */
export function openaiProviderError(error: unknown, inStream: boolean, fail: ProviderFail): ProviderError {
  if (error instanceof ProviderError) return error;
  if (error instanceof APIUserAbortError) return fail("openai: the request was cancelled", false);
  if (error instanceof APIConnectionError) {
    // A redirect, or a request for another origin, refused by the transport: non-retryable.
    // Its words may quote the server (a JSON error body): scrubbed of keys like any error.
    const refused = refusedByTransport(error);
    if (refused) return fail(refused.message, refused.retryable, transportExtra(refused));
    const cause = (error as { cause?: unknown }).cause;
    const detail = cause instanceof Error && cause.message ? ` (${cause.message})` : "";
    return fail(`openai: ${error.message}${detail}`, true);
  }
  if (error instanceof APIError) {
    const status = error.status;
    const type = [error.type, error.code].find((v): v is string => typeof v === "string");
    const kind = type === undefined ? {} : { type };
    if (status === undefined) {
      // An error inside the stream: judged like the same error over HTTP.
      const body = error.error as { status?: unknown; code?: unknown; type?: unknown } | undefined;
      const retryable = streamErrorRetryable({ status: body?.status, code: error.code, type: error.type });
      return fail(`openai: stream error: ${error.message}`, retryable, kind);
    }
    const retryable = httpErrorRetryable(status, error, error.headers);
    return fail(`openai: ${error.message}`, retryable, {
      status,
      ...kind,
      ...(retryable ? { retryAfterMs: retryAfterMs(error.headers) } : {}),
    });
  }
  const message = error instanceof Error ? error.message : String(error);
  // Anything else is the network failing under us (e.g. undici's "terminated").
  return fail(`openai: ${inStream ? "the stream broke" : "the request failed"}: ${message}`, true);
}
