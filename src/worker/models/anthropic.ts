/**
 * The Anthropic provider: the Messages API, streamed (resume-semantics.md §6).
 *
 * Request: the history becomes alternating user/assistant turns (see `toAnthropicMessages`).
 * The SDK's own retries are off (`maxRetries: 0`): the runtime retries, and only before any
 * output (call-model.ts). The API key comes from the worker's environment and goes to the SDK
 * only; it is never logged, stored or put in an error (errors are scrubbed besides:
 * scrub-secrets.ts). The client takes nothing from the environment: key, auth token, base
 * URL, log level and tracing are given, and ANTHROPIC_CUSTOM_HEADERS is cancelled; it sends
 * only to its base URL and never follows a redirect (transport.ts).
 *
 * Response: raw stream events. Text deltas are yielded as they arrive; a tool call is
 * yielded whole once its block stops; `message_stop` yields `done` with the normalised stop
 * reason and the usage. Only `message_stop` makes a step whole (§6): a stream that ends or
 * breaks before it — even after `message_delta` carried the stop reason — ends without `done`
 * after output (the runtime records `interrupted` and keeps the partial text); one that breaks
 * before any output throws a retryable ProviderError, since nothing reached the caller and a
 * retry is safe. Usage is what `message_start`/`message_delta` reported (input counts cache
 * reads and writes); when they did not report both counts it is `null`, unknown. Cache reads and
 * writes (`cache_read_input_tokens`, `cache_creation_input_tokens`) are `cacheReadTokens` /
 * `cacheWriteTokens`, `output_tokens_details.thinking_tokens` is `reasoningTokens`.
 *
 * Thinking (contracts §13): `thinking` and `redacted_thinking` blocks are assembled from their
 * deltas (`thinking_delta`, `signature_delta`) and, with the step's text and tool_use blocks
 * in stream order, become the step's `providerState` (provider-state.ts) — only on a whole
 * step (`message_stop`), and only when the step has thinking. A thinking block without a
 * signature (no `signature_delta` came), or with a NUL or lone surrogate that storing would
 * replace, is left out: the API refuses it back. The request side (replay,
 * thinking settings, cache breakpoints) is anthropic-request.ts.
 *
 * Errors: an HTTP error is retried for 408/409/429/5xx (or as `x-should-retry` says); an
 * `error` event in the stream is judged the same way from its type (`streamErrorRetryable`):
 * `overloaded_error` is retried, `authentication_error` is not.
 *
 * `temperature` is not sent: SDK 1.x sends API version 2026-10-21, which has no sampling
 * parameters and answers 400 to any `temperature` (even 1.0); the SDK dropped the field too.
 */
import Anthropic, { APIConnectionError, APIError, APIUserAbortError } from "@anthropic-ai/sdk";
import type { RawMessageStreamEvent } from "@anthropic-ai/sdk/resources/messages";
import { isStorableText, type ProviderState, type ToolCall, type Usage } from "../../shared/messages.js";
import { scrubSecrets, secretValuesFromEnv } from "../../shared/scrub-secrets.js";
import { fromAnthropicStopReason } from "../../shared/stop-reasons.js";
import { reportedTokens } from "../../shared/usage.js";
import {
  ANTHROPIC_BASE_URL,
  type AnthropicModelConfig,
  anthropicTarget,
  buildAnthropicRequest,
} from "./anthropic-request.js";
import { nestsTooDeep } from "./openai-tool-calls.js";
import {
  keyToSend,
  type ModelEvent,
  type ModelIdentity,
  type ModelProvider,
  type ModelRequest,
  ProviderError,
  type ProviderErrorExtra,
  type ProviderErrorInfo,
  type ProviderKey,
  providerError,
  retryAfterMs,
  retryableStatus,
  streamErrorRetryable,
} from "./provider.js";
import { makeState } from "./provider-state.js";
import { customHeaderOverrides, guardedFetch, hostOf, refusedByTransport } from "./transport.js";

export const MISSING_ANTHROPIC_KEY = "ANTHROPIC_API_KEY is not set in the worker's environment";

// ---------------------------------------------------------------------------------------------
// Errors

/** A 400 (or 413) whose message says the prompt does not fit the context window. */
const CONTEXT_FULL_TEXT =
  /prompt is too long|prompt_too_long|context[ _-]?(window|length|limit)|too many (input )?tokens|request_too_large/i;

type Failure = ProviderError | "context_full";

export class AnthropicModel implements ModelProvider {
  /** A private field: logging or serialising the provider cannot show the key. */
  readonly #key: ProviderKey;
  /** Where the requests go, for errors and logs. */
  private readonly info: ProviderErrorInfo;
  readonly identity: ModelIdentity;

  /** `options` is decided by create-model.ts from the model's route; `config.baseUrl` is where it goes. */
  constructor(
    readonly config: AnthropicModelConfig,
    options: ProviderKey,
  ) {
    this.#key = { ...options };
    this.identity = { provider: "anthropic", model: config.model };
    this.info = {
      provider: "anthropic",
      host: hostOf(config.baseUrl ?? ANTHROPIC_BASE_URL),
      ...(config.endpoint === undefined ? {} : { endpoint: config.endpoint }),
    };
  }

  /** The route's key, the environment's keys and anything shaped like a key, removed. */
  private redact(text: string): string {
    return scrubSecrets(text, [this.#key.apiKey, ...secretValuesFromEnv(process.env)]);
  }

  private fail(message: string, retryable: boolean, extra: ProviderErrorExtra = {}): ProviderError {
    return providerError(message, retryable, extra, this.info, (text) => this.redact(text));
  }

  /** What a failed request means: a ProviderError to throw, or a full context window. */
  private classify(error: unknown): Failure {
    if (error instanceof ProviderError) return error;
    if (error instanceof APIUserAbortError) return this.fail("the request was aborted", false);
    if (error instanceof APIConnectionError) {
      // A redirect, or a request for another origin, refused by the transport: non-retryable.
      const refused = refusedByTransport(error);
      if (refused) return refused;
      const cause = error.cause instanceof Error ? `: ${error.cause.message}` : "";
      return this.fail(`anthropic: ${error.message}${cause}`, true);
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
        return this.fail(`anthropic stream error: ${detail}`, retryable, type);
      }
      if ((status === 400 || status === 413) && CONTEXT_FULL_TEXT.test(detail)) return "context_full";
      const message = `anthropic: HTTP ${status}: ${detail}`;
      const shouldRetry = error.headers?.get("x-should-retry");
      const retryable = shouldRetry === "true" || (shouldRetry !== "false" && retryableStatus(status));
      return this.fail(message, retryable, {
        status,
        ...type,
        ...(retryable ? { retryAfterMs: retryAfterMs(error.headers) } : {}),
      });
    }
    const text = error instanceof Error ? error.message : String(error);
    return this.fail(`anthropic: ${text}`, true);
  }

  /** A client that takes nothing from the environment (see the file comment). */
  private client(): Anthropic {
    let apiKey: string;
    try {
      apiKey = keyToSend(this.#key, MISSING_ANTHROPIC_KEY);
    } catch (error) {
      throw error instanceof ProviderError ? this.fail(error.message, false) : error;
    }
    const baseURL = this.config.baseUrl ?? ANTHROPIC_BASE_URL;
    try {
      return new Anthropic({
        // A key given in code is the SDK's only credential: it reads none from process.env
        // (ANTHROPIC_API_KEY, ANTHROPIC_AUTH_TOKEN, profiles); the base URL is given as well.
        apiKey,
        authToken: null,
        webhookKey: null,
        baseURL,
        // ANTHROPIC_CUSTOM_HEADERS has no option: its headers are cancelled one by one. The
        // SDK sends the key as `Authorization: Bearer`.
        defaultHeaders: customHeaderOverrides("ANTHROPIC_CUSTOM_HEADERS", `Bearer ${apiKey}`),
        // Only to the base URL's origin, never following a redirect (transport.ts).
        fetch: guardedFetch(baseURL, this.info),
        // No spans and no trace context sent along (nor ANTHROPIC_OPEN_TELEMETRY* read).
        openTelemetry: false,
        // The SDK must never print anything of a request (ANTHROPIC_LOG is not read).
        logLevel: "off",
        maxRetries: 0,
      });
    } catch (error) {
      throw this.fail(`anthropic: the client cannot be configured: ${(error as Error).message}`, false);
    }
  }

  async *stream(request: ModelRequest): AsyncIterable<ModelEvent> {
    const client = this.client();

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
    // Each count as last reported; null while the stream has not reported it.
    let inputTokens: number | null = null;
    let outputTokens: number | null = null;
    let cacheRead: number | null = null;
    let cacheWrite: number | null = null;
    let thinkingTokens: number | null = null;
    /** Every block of the step by index, as the API sent it (for `providerState`). */
    const blocks = new Map<number, Record<string, unknown>>();
    const toolBlocks = new Map<number, { id: string; name: string; json: string; input: unknown }>();
    type ReportedUsage = {
      input_tokens?: number | null;
      output_tokens?: number | null;
      cache_creation_input_tokens?: number | null;
      cache_read_input_tokens?: number | null;
      output_tokens_details?: { thinking_tokens?: number | null } | null;
    };
    // A count the provider sent that is no count (negative, infinite) makes the step's usage
    // unknown: keeping an earlier report instead would undercount it (usage.ts).
    let badCount = false;
    const count = (n: unknown): number | null => {
      if (n === undefined || n === null) return null;
      const tokens = reportedTokens(n);
      if (tokens === undefined) badCount = true;
      return tokens ?? null;
    };
    const report = (u: ReportedUsage | null | undefined) => {
      if (!u) return;
      // Total input = uncached + cache writes + cache reads.
      const input = count(u.input_tokens);
      cacheWrite = count(u.cache_creation_input_tokens) ?? cacheWrite;
      cacheRead = count(u.cache_read_input_tokens) ?? cacheRead;
      if (input !== null) inputTokens = input + (cacheWrite ?? 0) + (cacheRead ?? 0);
      outputTokens = count(u.output_tokens) ?? outputTokens;
      thinkingTokens = count(u.output_tokens_details?.thinking_tokens) ?? thinkingTokens;
    };

    /** The usage reported so far (for a step cut before `message_stop`), or null. */
    const reportedSoFar = () =>
      badCount ? null : usageOf(inputTokens, outputTokens, cacheRead, cacheWrite, thinkingTokens);

    try {
      for await (const event of events) {
        switch (event.type) {
          case "message_start": {
            report(event.message.usage);
            const sofar = reportedSoFar();
            if (sofar) yield { type: "usage", usage: sofar };
            break;
          }
          case "content_block_start": {
            const block = event.content_block;
            if (block.type === "text") {
              blocks.set(event.index, { type: "text", text: block.text ?? "" });
              if (block.text) {
                output = true;
                yield { type: "text", delta: block.text };
              }
            } else if (block.type === "tool_use") {
              blocks.set(event.index, { type: "tool_use", id: block.id, name: block.name });
              toolBlocks.set(event.index, { id: block.id, name: block.name, json: "", input: block.input });
            } else if (block.type === "thinking") {
              blocks.set(event.index, {
                type: "thinking",
                thinking: block.thinking ?? "",
                signature: block.signature ?? "",
              });
            } else if (block.type === "redacted_thinking") {
              blocks.set(event.index, { type: "redacted_thinking", data: block.data });
            }
            break;
          }
          case "content_block_delta": {
            const delta = event.delta;
            const block = blocks.get(event.index);
            if (delta.type === "text_delta" && delta.text) {
              if (block?.type === "text") block.text = `${block.text as string}${delta.text}`;
              output = true;
              yield { type: "text", delta: delta.text };
            } else if (delta.type === "thinking_delta") {
              if (block?.type === "thinking") block.thinking = `${block.thinking as string}${delta.thinking}`;
              if (typeof delta.thinking === "string" && delta.thinking)
                yield { type: "progress", chars: delta.thinking.length };
            } else if (delta.type === "signature_delta") {
              if (block?.type === "thinking")
                block.signature = `${block.signature as string}${delta.signature}`;
            } else if (delta.type === "input_json_delta") {
              const block = toolBlocks.get(event.index);
              if (block) block.json += delta.partial_json;
              if (typeof delta.partial_json === "string" && delta.partial_json)
                yield { type: "progress", chars: delta.partial_json.length };
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
            report(event.usage);
            const sofar = reportedSoFar();
            if (sofar) yield { type: "usage", usage: sofar };
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
              usage: badCount
                ? null
                : usageOf(inputTokens, outputTokens, cacheRead, cacheWrite, thinkingTokens),
              ...this.state(blocks),
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
        throw this.fail("anthropic stream error: the context window is full", false);
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

  /**
   * The step's blocks in stream order, as its provider state (provider-state.ts) — only when
   * it has thinking to send back. A thinking block that never got its `signature_delta` is
   * left out: the API refuses a thinking block without its signature, so it could never go
   * back, and a tool turn left without a thinking block is continued without thinking
   * (anthropic-request.ts). So is one holding what cannot be stored as it is (a NUL, a lone
   * surrogate: contracts §12): stored with U+FFFD in its place, it no longer matches its
   * signature, and every later request of the turn would be refused ("Invalid signature").
   */
  private state(blocks: Map<number, Record<string, unknown>>): { providerState?: ProviderState } {
    const content = [...blocks.entries()]
      .sort((a, b) => a[0] - b[0])
      .map(([, block]) => block)
      .filter((block) => block.type !== "thinking" || (block.signature !== "" && storedAsItCame(block)))
      .filter((block) => block.type !== "redacted_thinking" || storedAsItCame(block));
    if (!content.some((block) => block.type === "thinking" || block.type === "redacted_thinking")) return {};
    return { providerState: makeState(anthropicTarget(this.config), { content }) };
  }

  /** A stream that broke: after output, end without `done`; before any, fail retryably. */
  private broken(output: boolean, request: ModelRequest, why: string): void {
    if (output) return;
    if (request.signal.aborted) throw this.fail("the request was aborted", false);
    throw this.fail(`anthropic: ${why} (before any output)`, true);
  }
}

/** Whether every string of a thinking block is stored unchanged (no U+0000, no lone surrogate). */
function storedAsItCame(block: Record<string, unknown>): boolean {
  return Object.values(block).every((value) => typeof value !== "string" || isStorableText(value));
}

/** Both counts as reported (with the cache and thinking counts reported), or unknown. */
function usageOf(
  inputTokens: number | null,
  outputTokens: number | null,
  cacheRead: number | null = null,
  cacheWrite: number | null = null,
  thinkingTokens: number | null = null,
): Usage | null {
  if (inputTokens === null || outputTokens === null) return null;
  return {
    inputTokens,
    outputTokens,
    ...(cacheRead === null ? {} : { cacheReadTokens: cacheRead }),
    ...(cacheWrite === null ? {} : { cacheWriteTokens: cacheWrite }),
    ...(thinkingTokens === null ? {} : { reasoningTokens: thinkingTokens }),
  };
}

/** A tool_use block's accumulated input as a call; input that is not a JSON object is kept raw. */
function toolCall(block: { id: string; name: string; json: string; input: unknown }): ToolCall {
  return { id: block.id, name: block.name, arguments: parseToolInput(block.json, block.input) };
}

export function parseToolInput(json: string, initial: unknown): Record<string, unknown> {
  if (json.trim() === "") return isObject(initial) && !nestsTooDeep(initial) ? initial : {};
  try {
    const parsed: unknown = JSON.parse(json);
    // Nested past MAX_TOOL_ARGUMENT_DEPTH: kept as text, as openai-tool-calls.ts does.
    return isObject(parsed) && !nestsTooDeep(parsed) ? parsed : { _raw: json };
  } catch {
    return { _raw: json };
  }
}

function isObject(value: unknown): value is Record<string, unknown> {
  return typeof value === "object" && value !== null && !Array.isArray(value);
}
