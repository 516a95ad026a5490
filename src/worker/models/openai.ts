/**
 * The OpenAI-compatible provider: chat completions, streamed, for OpenAI itself and for
 * compatible servers (vLLM, Ollama, llama.cpp) through `baseUrl`.
 *
 * History → request (resume-semantics.md §1):
 * - the agent's system prompt is the first `system` message;
 * - `user` and `internal` messages are both sent as `user` messages, verbatim: the runtime's
 *   internal texts (retry/continue instructions) are written to be read as they are, so no
 *   marker is added;
 * - an `assistant` message is replayed with its text, and with its tool calls (arguments
 *   JSON-stringified) only when the step really asked for them (`requestsTools`): a
 *   response cut by a fault (`interrupted`), by the output limit (`max_output`) or
 *   otherwise abnormal may carry half-formed calls that were never run and have no
 *   results, which the provider would reject;
 * - a `tool` message is a `tool` message with its `tool_call_id`; a failed result
 *   (`success: false`, e.g. the synthetic "interrupted" results) is prefixed "Error: ".
 *
 * Stream → events (§6):
 * - text deltas are yielded as they arrive (a `refusal` delta is text too);
 * - tool call fragments are assembled by index and yielded, whole, once the response has
 *   finished; arguments that are not a JSON object are kept as `{ "_raw": "<string>" }`
 *   so nothing the model wrote is lost (empty arguments are `{}`);
 * - `finish_reason` is normalised by `fromOpenAIFinishReason`; tool calls with `stop` (some
 *   servers do that) are `tool_use`; a refusal delta with `stop` is `refusal`;
 * - usage comes from the usage chunk (`stream_options.include_usage`);
 * - a response is whole only with its `finish_reason` chunk and the terminal `data: [DONE]`
 *   (§6: a stream that does not finish is `interrupted`; the SDK hides `[DONE]`, so the body
 *   is watched on its way in, see sse-done.ts). A stream that ends or breaks before either,
 *   after some text, ends without `done` (the runtime records `interrupted`, partial text
 *   kept) — a break after `finish_reason` too: the server never said it was finished. If
 *   it breaks before any text, nothing reached the caller, so a retryable ProviderError is
 *   thrown and the runtime retries the request.
 *
 * Errors: a request rejected for its context length is not an error but a response that
 * stopped with `context_full` (no text). 408/409/429/5xx, in-stream errors and connection
 * errors are retryable (with the server's `retry-after-ms`/`retry-after`); other 4xx are
 * not. The API key never appears in a message: it is scrubbed from the server's text.
 */
import OpenAI, { APIConnectionError, APIError, APIUserAbortError } from "openai";
import type {
  ChatCompletionChunk,
  ChatCompletionCreateParamsStreaming,
} from "openai/resources/chat/completions";
import { Stream } from "openai/streaming";
import type { z } from "zod";
import type { openaiModelSchema } from "../../shared/agent-config.js";
import type { Usage } from "../../shared/messages.js";
import { fromOpenAIFinishReason } from "../../shared/stop-reasons.js";
import { toOpenAIMessages, toOpenAITools } from "./openai-request.js";
import { ToolCallAssembler } from "./openai-tool-calls.js";
import {
  keyToSend,
  type ModelEvent,
  type ModelProvider,
  type ModelRequest,
  ProviderError,
  type ProviderKey,
  retryAfterMs,
} from "./provider.js";
import { watchForDone } from "./sse-done.js";

export { parseToolArguments, RAW_ARGUMENTS_KEY } from "./openai-tool-calls.js";

export type OpenAIModelConfig = z.infer<typeof openaiModelSchema>;

export const MISSING_OPENAI_KEY = "OPENAI_API_KEY is not set in the worker's environment";

/** Where the SDK would go by itself; passed explicitly so OPENAI_BASE_URL is never read. */
const OPENAI_BASE_URL = "https://api.openai.com/v1";

const CONTEXT_LENGTH_PATTERN =
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

export class OpenAIModel implements ModelProvider {
  private client: OpenAI | undefined;

  constructor(
    readonly config: OpenAIModelConfig,
    /** Decided by create-model.ts from the model's route; `config.baseUrl` is where it goes. */
    private readonly options: ProviderKey,
  ) {}

  async *stream(request: ModelRequest): AsyncIterable<ModelEvent> {
    const client = this.getClient();
    let stream: AsyncIterable<ChatCompletionChunk>;
    let sawDone: () => boolean;
    try {
      // The raw response, so that its body can be watched for `[DONE]` before the SDK parses it.
      const raw = await client.chat.completions
        .create(this.body(request), { signal: request.signal })
        .asResponse();
      const watch = watchForDone(raw);
      sawDone = watch.sawDone;
      stream = Stream.fromSSEResponse<ChatCompletionChunk>(watch.response, new AbortController(), client);
    } catch (error) {
      this.throwIfAborted(request.signal);
      if (isContextLengthError(error)) {
        yield { type: "done", stopReason: "context_full" };
        return;
      }
      throw this.toProviderError(error);
    }

    let textStarted = false;
    let refused = false;
    let finishReason: string | null = null;
    let usage: Usage | undefined;
    let streamError: unknown;
    const calls = new ToolCallAssembler();
    try {
      for await (const chunk of stream) {
        if (chunk.usage) {
          usage = {
            inputTokens: chunk.usage.prompt_tokens ?? 0,
            outputTokens: chunk.usage.completion_tokens ?? 0,
          };
        }
        const choice = chunk.choices?.[0];
        if (!choice) continue;
        const delta = choice.delta ?? {};
        if (typeof delta.content === "string" && delta.content.length > 0) {
          textStarted = true;
          yield { type: "text", delta: delta.content };
        }
        if (typeof delta.refusal === "string" && delta.refusal.length > 0) {
          textStarted = true;
          refused = true;
          yield { type: "text", delta: delta.refusal };
        }
        for (const fragment of delta.tool_calls ?? []) calls.add(fragment);
        if (delta.function_call) calls.addLegacy(delta.function_call);
        if (choice.finish_reason) finishReason = choice.finish_reason;
      }
    } catch (error) {
      streamError = error;
    }
    this.throwIfAborted(request.signal);

    if (finishReason === null || !sawDone()) {
      if (textStarted) return; // did not finish after output: no `done`, the runtime records `interrupted`
      if (streamError !== undefined) {
        if (finishReason === null && !calls.started && isContextLengthError(streamError)) {
          yield { type: "done", stopReason: "context_full" };
          return;
        }
        throw this.toProviderError(streamError, true);
      }
      throw new ProviderError(
        finishReason === null
          ? "openai: the stream ended before any output"
          : "openai: the stream ended before [DONE] (before any output)",
        true,
      );
    }

    const complete = calls.complete();
    let stopReason = fromOpenAIFinishReason(finishReason);
    if (stopReason === "end_turn" && complete.length > 0) stopReason = "tool_use";
    else if (stopReason === "end_turn" && refused) stopReason = "refusal";
    for (const call of complete) yield { type: "tool_call", call };
    yield { type: "done", stopReason, ...(usage ? { usage } : {}) };
  }

  private getClient(): OpenAI {
    if (this.client) return this.client;
    this.client = new OpenAI({
      apiKey: keyToSend(this.options, MISSING_OPENAI_KEY),
      // Every option the SDK would otherwise take from process.env is given here, so that
      // nothing of the worker's environment (another key, an organization) is sent anywhere.
      baseURL: this.config.baseUrl ?? OPENAI_BASE_URL,
      adminAPIKey: null,
      organization: null,
      project: null,
      webhookSecret: null,
      // The runtime retries (call-model.ts), only before output; the SDK must not.
      maxRetries: 0,
      // The SDK must never print anything of a request (headers included).
      logLevel: "off",
    });
    return this.client;
  }

  private body(request: ModelRequest): ChatCompletionCreateParamsStreaming {
    const { config } = this;
    return {
      model: config.model,
      messages: toOpenAIMessages(request.system, request.history),
      stream: true,
      stream_options: { include_usage: true },
      ...(request.tools.length > 0 ? { tools: toOpenAITools(request.tools) } : {}),
      ...(config.maxTokens === undefined
        ? {}
        : // Compatible servers know `max_tokens`; OpenAI itself wants `max_completion_tokens`.
          config.baseUrl
          ? { max_tokens: config.maxTokens }
          : { max_completion_tokens: config.maxTokens }),
      ...(config.temperature === undefined ? {} : { temperature: config.temperature }),
    };
  }

  private throwIfAborted(signal: AbortSignal): void {
    if (signal.aborted) throw new ProviderError("openai: the request was cancelled", false);
  }

  /** A ProviderError with the server's message (never a stack, never the key). */
  private toProviderError(error: unknown, inStream = false): ProviderError {
    if (error instanceof ProviderError) return error;
    if (error instanceof APIUserAbortError)
      return new ProviderError("openai: the request was cancelled", false);
    if (error instanceof APIConnectionError) {
      const cause = (error as { cause?: unknown }).cause;
      const detail = cause instanceof Error && cause.message ? ` (${cause.message})` : "";
      return new ProviderError(this.scrub(`openai: ${error.message}${detail}`), true);
    }
    if (error instanceof APIError) {
      const status = error.status;
      const text = this.scrub(`openai: ${error.message}`);
      if (status === undefined) return new ProviderError(text, true); // an error event in the stream
      const retryable = status === 408 || status === 409 || status === 429 || status >= 500;
      return new ProviderError(text, retryable, retryable ? retryAfterMs(error.headers) : undefined);
    }
    const message = error instanceof Error ? error.message : String(error);
    // Anything else is the network failing under us (e.g. undici's "terminated").
    return new ProviderError(
      this.scrub(`openai: ${inStream ? "the stream broke" : "the request failed"}: ${message}`),
      true,
    );
  }

  /** Removes the API key, and anything shaped like an OpenAI key, from a text. */
  private scrub(text: string): string {
    let out = text;
    const key = this.options.apiKey;
    if (key && key.length >= 4) out = out.split(key).join("[redacted]");
    return out.replace(/\bsk-[A-Za-z0-9_*-]{4,}/g, "sk-[redacted]");
  }
}
