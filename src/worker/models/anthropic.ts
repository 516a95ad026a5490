/**
 * The Anthropic provider: the Messages API, streamed (resume-semantics.md §6).
 *
 * Request: the history becomes alternating user/assistant turns (see `toAnthropicMessages`).
 * The SDK's own retries are off (`maxRetries: 0`): the runtime retries, and only before any
 * output (call-model.ts). The API key comes from the worker's environment and goes to the SDK
 * only; it is never logged, stored or put in an error (errors are redacted besides).
 *
 * Response: raw stream events. Text deltas are yielded as they arrive; a tool call is
 * yielded whole once its block stops; `message_stop` yields `done` with the normalised stop
 * reason and the usage. Only `message_stop` makes a step whole (§6): a stream that ends or
 * breaks before it — even after `message_delta` carried the stop reason — ends without `done`
 * after output (the runtime records `interrupted` and keeps the partial text); one that breaks
 * before any output throws a retryable ProviderError, since nothing reached the caller and a
 * retry is safe.
 *
 * `temperature` is not sent: SDK 1.x sends API version 2026-10-21, which has no sampling
 * parameters and answers 400 to any `temperature` (even 1.0); the SDK dropped the field too.
 */
import Anthropic, { APIConnectionError, APIError, APIUserAbortError } from "@anthropic-ai/sdk";
import type { RawMessageStreamEvent } from "@anthropic-ai/sdk/resources/messages";
import type { ToolCall, Usage } from "../../shared/messages.js";
import { fromAnthropicStopReason } from "../../shared/stop-reasons.js";
import { type AnthropicModelConfig, buildAnthropicRequest } from "./anthropic-request.js";
import {
  keyToSend,
  type ModelEvent,
  type ModelProvider,
  type ModelRequest,
  ProviderError,
  type ProviderKey,
  retryAfterMs,
} from "./provider.js";

export const MISSING_ANTHROPIC_KEY = "ANTHROPIC_API_KEY is not set in the worker's environment";

/** Where the SDK would go by itself; passed explicitly so ANTHROPIC_BASE_URL is never read. */
const ANTHROPIC_BASE_URL = "https://api.anthropic.com";

// ---------------------------------------------------------------------------------------------
// Errors

/** A 400 (or 413) whose message says the prompt does not fit the context window. */
const CONTEXT_FULL_TEXT =
  /prompt is too long|prompt_too_long|context[ _-]?(window|length|limit)|too many (input )?tokens|request_too_large/i;

/** Error types of a mid-stream `error` event that the same request would meet again. */
const PERMANENT_ERROR_TYPES = new Set([
  "invalid_request_error",
  "authentication_error",
  "billing_error",
  "permission_error",
  "not_found_error",
]);

type Failure = ProviderError | "context_full";

export class AnthropicModel implements ModelProvider {
  /** A private field: logging or serialising the provider cannot show the key. */
  readonly #key: ProviderKey;

  /** `options` is decided by create-model.ts from the model's route; `config.baseUrl` is where it goes. */
  constructor(
    readonly config: AnthropicModelConfig,
    options: ProviderKey,
  ) {
    this.#key = { ...options };
  }

  private redact(text: string): string {
    const key = this.#key.apiKey;
    return key ? text.split(key).join("[redacted]") : text;
  }

  /** What a failed request means: a ProviderError to throw, or a full context window. */
  private classify(error: unknown): Failure {
    if (error instanceof ProviderError) return error;
    if (error instanceof APIUserAbortError) return new ProviderError("the request was aborted", false);
    if (error instanceof APIConnectionError) {
      const cause = error.cause instanceof Error ? `: ${error.cause.message}` : "";
      return new ProviderError(this.redact(`anthropic: ${error.message}${cause}`), true);
    }
    if (error instanceof APIError) {
      const detail = this.redact(
        [error.type, error.errorCode, error.apiMessage ?? error.message].filter(Boolean).join(": "),
      );
      const status = error.status;
      if (status === undefined) {
        // An `error` event in the stream (e.g. overloaded_error).
        if (error.type === "invalid_request_error" && CONTEXT_FULL_TEXT.test(detail)) return "context_full";
        const permanent = PERMANENT_ERROR_TYPES.has(error.type ?? "");
        return new ProviderError(`anthropic stream error: ${detail}`, !permanent);
      }
      if ((status === 400 || status === 413) && CONTEXT_FULL_TEXT.test(detail)) return "context_full";
      const message = `anthropic: HTTP ${status}: ${detail}`;
      const shouldRetry = error.headers?.get("x-should-retry");
      const retryable =
        shouldRetry === "true" ||
        (shouldRetry !== "false" && (status === 408 || status === 409 || status === 429 || status >= 500));
      return new ProviderError(message, retryable, retryable ? retryAfterMs(error.headers) : undefined);
    }
    const text = error instanceof Error ? error.message : String(error);
    return new ProviderError(this.redact(`anthropic: ${text}`), true);
  }

  async *stream(request: ModelRequest): AsyncIterable<ModelEvent> {
    const client = new Anthropic({
      // A key given in code is the SDK's only credential: it reads none from process.env
      // (ANTHROPIC_API_KEY, ANTHROPIC_AUTH_TOKEN, profiles); the base URL is given as well.
      apiKey: keyToSend(this.#key, MISSING_ANTHROPIC_KEY),
      authToken: null,
      baseURL: this.config.baseUrl ?? ANTHROPIC_BASE_URL,
      maxRetries: 0,
    });

    let events: AsyncIterable<RawMessageStreamEvent>;
    try {
      events = await client.messages.create(buildAnthropicRequest(this.config, request), {
        signal: request.signal,
      });
    } catch (error) {
      const failure = this.classify(error);
      if (failure === "context_full") {
        yield { type: "done", stopReason: "context_full" };
        return;
      }
      throw failure;
    }

    let output = false;
    let stopReason: string | null = null;
    let usage: Usage | undefined;
    const toolBlocks = new Map<number, { id: string; name: string; json: string; input: unknown }>();
    const setUsage = (input: number | null | undefined, outputTokens: number | null | undefined) => {
      usage = {
        inputTokens: input == null ? (usage?.inputTokens ?? 0) : Math.max(0, Math.trunc(input)),
        outputTokens:
          outputTokens == null ? (usage?.outputTokens ?? 0) : Math.max(0, Math.trunc(outputTokens)),
      };
    };

    try {
      for await (const event of events) {
        switch (event.type) {
          case "message_start": {
            const u = event.message.usage;
            // Total input = uncached + cache writes + cache reads.
            setUsage(
              (u?.input_tokens ?? 0) +
                (u?.cache_creation_input_tokens ?? 0) +
                (u?.cache_read_input_tokens ?? 0),
              u?.output_tokens,
            );
            break;
          }
          case "content_block_start": {
            const block = event.content_block;
            if (block.type === "text" && block.text) {
              output = true;
              yield { type: "text", delta: block.text };
            } else if (block.type === "tool_use") {
              toolBlocks.set(event.index, { id: block.id, name: block.name, json: "", input: block.input });
            }
            break;
          }
          case "content_block_delta": {
            const delta = event.delta;
            if (delta.type === "text_delta" && delta.text) {
              output = true;
              yield { type: "text", delta: delta.text };
            } else if (delta.type === "input_json_delta") {
              const block = toolBlocks.get(event.index);
              if (block) block.json += delta.partial_json;
            }
            break;
          }
          case "content_block_stop": {
            const block = toolBlocks.get(event.index);
            if (block) {
              toolBlocks.delete(event.index);
              output = true;
              yield { type: "tool_call", call: toolCall(block) };
            }
            break;
          }
          case "message_delta": {
            if (event.delta.stop_reason) stopReason = event.delta.stop_reason;
            const u = event.usage;
            const input =
              u?.input_tokens == null
                ? undefined
                : u.input_tokens + (u.cache_creation_input_tokens ?? 0) + (u.cache_read_input_tokens ?? 0);
            setUsage(input, u?.output_tokens);
            break;
          }
          case "message_stop":
            // Without a stop reason the step is not known to be whole: treat it as a break.
            if (!stopReason) {
              this.broken(output, request, "the stream ended without a stop reason");
              return;
            }
            yield {
              type: "done",
              stopReason: fromAnthropicStopReason(stopReason),
              ...(usage ? { usage } : {}),
            };
            return;
          default:
            // Unknown event types (the API may add some) are ignored.
            break;
        }
      }
    } catch (error) {
      const failure = this.classify(error);
      if (failure === "context_full") {
        if (!output) {
          yield { type: "done", stopReason: "context_full" };
          return;
        }
        throw new ProviderError("anthropic stream error: the context window is full", false);
      }
      // An `error` event is the provider's answer: throw it. A transport break after output
      // ends the stream without `done` (interrupted, partial kept); before output it throws.
      if (error instanceof APIError && !(error instanceof APIConnectionError) && error.status === undefined)
        throw failure;
      this.broken(output, request, failure.message);
      return;
    }
    this.broken(output, request, "the stream ended before message_stop");
  }

  /** A stream that broke: after output, end without `done`; before any, fail retryably. */
  private broken(output: boolean, request: ModelRequest, why: string): void {
    if (output) return;
    if (request.signal.aborted) throw new ProviderError("the request was aborted", false);
    throw new ProviderError(`anthropic: ${why} (before any output)`, true);
  }
}

/** A tool_use block's accumulated input as a call; input that is not a JSON object is kept raw. */
function toolCall(block: { id: string; name: string; json: string; input: unknown }): ToolCall {
  return { id: block.id, name: block.name, arguments: parseToolInput(block.json, block.input) };
}

export function parseToolInput(json: string, initial: unknown): Record<string, unknown> {
  if (json.trim() === "") return isObject(initial) ? initial : {};
  try {
    const parsed: unknown = JSON.parse(json);
    return isObject(parsed) ? parsed : { _raw: json };
  } catch {
    return { _raw: json };
  }
}

function isObject(value: unknown): value is Record<string, unknown> {
  return typeof value === "object" && value !== null && !Array.isArray(value);
}
