/**
 * The Anthropic SDK's errors judged (used by anthropic.ts).
 *
 * An HTTP error is retried for 408/409/429/5xx (or as `x-should-retry` says); an `error`
 * event in the stream is judged the same way from its type (`streamErrorRetryable`):
 * `overloaded_error` is retried, `authentication_error` is not. A 400 (or 413, or an
 * `invalid_request_error` event) saying the prompt does not fit is not an error but a full
 * context window. Messages are scrubbed of keys by the provider's `fail`.
 */
import { APIConnectionError, APIError, APIUserAbortError } from "@anthropic-ai/sdk";
import {
  httpErrorRetryable,
  ProviderError,
  type ProviderFail,
  retryAfterMs,
  streamErrorRetryable,
} from "./provider.js";
import { refusedByTransport, transportExtra } from "./transport.js";

/** A 400 (or 413) whose message says the prompt does not fit the context window. */
const CONTEXT_FULL_TEXT =
  /prompt is too long|prompt_too_long|context[ _-]?(window|length|limit)|too many (input )?tokens|request_too_large/i;

export type Failure = ProviderError | "context_full";

/** What a failed request means: a ProviderError to throw, or a full context window. */
export function classifyAnthropicError(error: unknown, fail: ProviderFail): Failure {
  if (error instanceof ProviderError) return error;
  if (error instanceof APIUserAbortError) return fail("the request was aborted", false);
  if (error instanceof APIConnectionError) {
    // A redirect, or a request for another origin, refused by the transport: non-retryable.
    // Its words may quote the server (a JSON error body): scrubbed of keys like any error.
    const refused = refusedByTransport(error);
    if (refused) return fail(refused.message, refused.retryable, transportExtra(refused));
    const cause = error.cause instanceof Error ? `: ${error.cause.message}` : "";
    return fail(`anthropic: ${error.message}${cause}`, true);
  }
  if (error instanceof APIError) {
    const detail = [error.type, error.errorCode, error.apiMessage ?? error.message]
      .filter(Boolean)
      .join(": ");
    const type = typeof error.type === "string" ? { type: error.type } : {};
    const status = error.status;
    if (status === undefined) {
      // An `error` event in the stream: judged like the same error over HTTP.
      if (error.type === "invalid_request_error" && CONTEXT_FULL_TEXT.test(detail)) return "context_full";
      const body = error.error as { error?: { status?: unknown; code?: unknown } } | undefined;
      const retryable = streamErrorRetryable({
        status: body?.error?.status,
        code: error.errorCode ?? body?.error?.code,
        type: error.type,
      });
      return fail(`anthropic stream error: ${detail}`, retryable, type);
    }
    if ((status === 400 || status === 413) && CONTEXT_FULL_TEXT.test(detail)) return "context_full";
    const message = `anthropic: HTTP ${status}: ${detail}`;
    const retryable = httpErrorRetryable(status, error, error.headers);
    return fail(message, retryable, {
      status,
      ...type,
      ...(retryable ? { retryAfterMs: retryAfterMs(error.headers) } : {}),
    });
  }
  const text = error instanceof Error ? error.message : String(error);
  return fail(`anthropic: ${text}`, true);
}
