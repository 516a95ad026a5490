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
 *   results, which the provider would reject; a step with no text and no replayed calls (a
 *   `max_output` or `interrupted` step that produced only calls or nothing, a `context_full`
 *   or `refusal` record) is left out, as the Anthropic and Responses requests leave it out:
 *   vLLM and Mistral answer 400 to an assistant message with empty content and no tool calls,
 *   so a resume of such a step (continue_response) or new input after it could never be sent;
 * - a `tool` message is a `tool` message with its `tool_call_id`; a failed result
 *   (`success: false`, e.g. the synthetic "interrupted" results) is prefixed "Error: ";
 * - a tool call id over 40 characters (another provider's, an import's), which OpenAI refuses,
 *   goes out shortened, the same for the call and its result (wire-ids.ts); a call's name
 *   outside `^[a-zA-Z0-9_-]{1,64}$` (a model's `functions.write_file`), which OpenAI refuses
 *   too, goes out rewritten (`openaiToolName`), in the Responses API's requests as well.
 *
 * Stream → events (§6):
 * - text deltas are yielded as they arrive (a `refusal` delta is text too);
 * - tool call fragments are assembled by index and yielded, whole, once the response has
 *   finished (each fragment's characters as a `progress` event meanwhile, as is the reasoning
 *   a compatible server streams as `reasoning_content` or `reasoning`, which is not kept); arguments that are not a JSON object are kept as `{ "_raw": "<string>" }`
 *   so nothing the model wrote is lost (empty arguments are `{}`);
 * - `finish_reason` is normalised by `fromOpenAIFinishReason`; tool calls with `stop` (some
 *   servers do that) are `tool_use`; a refusal delta with `stop` is `refusal`;
 * - usage comes from the usage chunk (`stream_options.include_usage`); without one (or with
 *   one lacking a count) it is `null`, unknown — never 0 tokens;
 * - a response is whole only with its `finish_reason` chunk and the terminal `data: [DONE]`
 *   (§6: a stream that does not finish is `interrupted`; the SDK hides `[DONE]`, so the body
 *   is watched on its way in, see sse-done.ts). A stream that ends or breaks before either,
 *   after some text, ends without `done` (the runtime records `interrupted`, partial text
 *   kept) — a break after `finish_reason` too: the server never said it was finished. If
 *   it breaks before any text, nothing reached the caller, so a retryable ProviderError is
 *   thrown and the runtime retries the request.
 *
 * Errors: a request rejected for its context length is not an error but a response that
 * stopped with `context_full` (no text). 408/409/429/5xx and connection errors are retryable
 * (with the server's `retry-after-ms`/`retry-after`); other 4xx are not. An error inside the
 * stream (`data: {"error": {...}}`) is judged the same way from its status, code or type
 * (`streamErrorRetryable`): an invalid key in a stream is not retried. A redirect is never
 * followed (transport.ts). No message carries a key: the route's key, the environment's
 * keys and anything shaped like one are scrubbed from the server's text (scrub-secrets.ts).
 *
 * MODEL `api: "responses"` uses the Responses API instead (openai-responses.ts): same client,
 * same transport and key rules, same error handling. A model that refuses
 * `include: ["reasoning.encrypted_content"]` or the reasoning items of a history (one that
 * does not reason, e.g. a fallback after a reasoning model of the same endpoint) is asked
 * again without it and without any step's provider state, and so from then on. `reasoningEffort` is sent as
 * `reasoning_effort` here and as `reasoning.effort` there. Chat usage reports
 * `prompt_tokens_details.cached_tokens` as `cacheReadTokens` and
 * `completion_tokens_details.reasoning_tokens` as `reasoningTokens` when the server sends them.
 *
 * The client takes nothing from the environment: every option the SDK would read there is
 * given (key, organization, project, base URL, log level), and the headers of
 * OPENAI_CUSTOM_HEADERS are cancelled (transport.ts).
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
import { scrubSecrets, secretValuesFromEnv } from "../../shared/scrub-secrets.js";
import { fromOpenAIFinishReason } from "../../shared/stop-reasons.js";
import { reportedTokens } from "../../shared/usage.js";
import { toOpenAIMessages, toOpenAITools } from "./openai-request.js";
import { buildResponsesBody, ResponsesStreamError, ResponsesStreamReader } from "./openai-responses.js";
import { ToolCallAssembler } from "./openai-tool-calls.js";
import {
  httpErrorRetryable,
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
  streamErrorRetryable,
} from "./provider.js";
import { type StateTarget, targetOf } from "./provider-state.js";
import { RecentSet } from "./recent-set.js";
import { watchForDone } from "./sse-done.js";
import { customHeaderOverrides, guardedFetch, hostOf, refusedByTransport } from "./transport.js";

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

const tokens = reportedTokens;

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

/**
 * `target model` of the Responses models known to refuse encrypted reasoning, learnt from
 * their answers (refusesEncryptedReasoning): asked without it from then on in this process.
 * Model names come from users' agent configs: the 64 most recently used are remembered (one
 * forgotten is asked with it once more, refused, and remembered again).
 */
const WITHOUT_ENCRYPTED_REASONING = new RecentSet(64);

/** A string's length; 0 for anything else. */
function lengthOf(value: unknown): number {
  return typeof value === "string" ? value.length : 0;
}

/** Usage from a usage chunk: both counts (and the cached / reasoning ones reported), or unknown. */
function usageOf(usage: ChatCompletionChunk["usage"]): Usage | null {
  const input = tokens(usage?.prompt_tokens);
  const output = tokens(usage?.completion_tokens);
  if (input === undefined || output === undefined) return null;
  const cached = tokens(usage?.prompt_tokens_details?.cached_tokens);
  const reasoning = tokens(usage?.completion_tokens_details?.reasoning_tokens);
  return {
    inputTokens: input,
    outputTokens: output,
    ...(cached === undefined ? {} : { cacheReadTokens: cached }),
    ...(reasoning === undefined ? {} : { reasoningTokens: reasoning }),
  };
}

export class OpenAIModel implements ModelProvider {
  private client: OpenAI | undefined;
  /** Where the requests go, for errors and logs. */
  private readonly info: ProviderErrorInfo;
  readonly identity: ModelIdentity;
  /** Where a step's provider state may be replayed (provider-state.ts). */
  readonly target: StateTarget;

  constructor(
    readonly config: OpenAIModelConfig,
    /** Decided by create-model.ts from the model's route; `config.baseUrl` is where it goes. */
    private readonly options: ProviderKey,
  ) {
    this.identity = { provider: "openai", model: config.model };
    this.target = targetOf("openai", config.api ?? "chat", config, OPENAI_BASE_URL);
    this.info = {
      provider: "openai",
      host: hostOf(config.baseUrl ?? OPENAI_BASE_URL),
      ...(config.endpoint === undefined ? {} : { endpoint: config.endpoint }),
    };
  }

  async *stream(request: ModelRequest): AsyncIterable<ModelEvent> {
    if (this.config.api === "responses") {
      yield* this.streamResponses(request);
      return;
    }
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
    let usage: Usage | null = null;
    let streamError: unknown;
    const calls = new ToolCallAssembler();
    try {
      for await (const chunk of stream) {
        if (chunk.usage) {
          usage = usageOf(chunk.usage);
          // Billed even if the stream breaks before [DONE] (call-model.ts counts it then).
          if (usage) yield { type: "usage", usage };
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
        // Reasoning a compatible server streams before the answer (vLLM/DeepSeek
        // `reasoning_content`, Ollama `reasoning`) is not kept, but shows the stream is alive.
        const reasoning = delta as { reasoning_content?: unknown; reasoning?: unknown };
        let chars = lengthOf(reasoning.reasoning_content) + lengthOf(reasoning.reasoning);
        for (const fragment of delta.tool_calls ?? []) chars += calls.add(fragment);
        if (delta.function_call) chars += calls.addLegacy(delta.function_call);
        if (chars > 0) yield { type: "progress", chars };
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
      throw this.fail(
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
    yield { type: "done", stopReason, usage };
  }

  /** The Responses API (openai-responses.ts). */
  private async *streamResponses(request: ModelRequest): AsyncIterable<ModelEvent> {
    const client = this.getClient();
    const model = `${this.target.target} ${this.config.model}`;
    let body = buildResponsesBody(this.config, request, this.target, !WITHOUT_ENCRYPTED_REASONING.has(model));
    let stream: AsyncIterable<import("openai/resources/responses/responses").ResponseStreamEvent>;
    try {
      try {
        stream = await client.responses.create(body, { signal: request.signal });
      } catch (error) {
        // A model that does not reason refuses encrypted reasoning: nothing was answered, so
        // the same request goes again without it, and this model's next ones go without it.
        if (!body.include || !refusesEncryptedReasoning(error)) throw error;
        WITHOUT_ENCRYPTED_REASONING.add(model);
        body = buildResponsesBody(this.config, request, this.target, false);
        stream = await client.responses.create(body, { signal: request.signal });
      }
    } catch (error) {
      this.throwIfAborted(request.signal);
      if (isContextLengthError(error)) {
        yield { type: "done", stopReason: "context_full" };
        return;
      }
      throw this.toProviderError(error);
    }
    const reader = new ResponsesStreamReader(this.target);
    let streamError: unknown;
    try {
      for await (const event of stream) {
        const { events, end } = reader.read(event);
        for (const out of events) yield out;
        if (end) return;
      }
    } catch (error) {
      streamError = error;
    }
    this.throwIfAborted(request.signal);
    if (streamError instanceof ResponsesStreamError) {
      // A failed response's usage was billed: reported before the failure (call-model.ts counts it).
      if (streamError.usage) yield { type: "usage", usage: streamError.usage };
      const text = `${streamError.code ?? ""} ${streamError.message}`;
      if (!reader.output && CONTEXT_LENGTH_PATTERN.test(text)) {
        yield { type: "done", stopReason: "context_full" };
        return;
      }
      const retryable = streamErrorRetryable({ code: streamError.code, type: streamError.type });
      throw this.fail(
        `openai: ${streamError.message}`,
        retryable,
        streamError.code ? { type: streamError.code } : {},
      );
    }
    if (reader.output) return; // cut after output: no `done`, the runtime records `interrupted`
    if (streamError !== undefined) {
      if (isContextLengthError(streamError)) {
        yield { type: "done", stopReason: "context_full" };
        return;
      }
      throw this.toProviderError(streamError, true);
    }
    throw this.fail("openai: the stream ended before response.completed (before any output)", true);
  }

  private getClient(): OpenAI {
    if (this.client) return this.client;
    let apiKey: string;
    try {
      apiKey = keyToSend(this.options, MISSING_OPENAI_KEY);
    } catch (error) {
      throw error instanceof ProviderError ? this.fail(error.message, false) : error;
    }
    const baseURL = this.config.baseUrl ?? OPENAI_BASE_URL;
    try {
      this.client = new OpenAI({
        apiKey,
        // Every option the SDK would otherwise take from process.env is given here, so that
        // nothing of the worker's environment (another key, an organization) is sent anywhere.
        baseURL,
        adminAPIKey: null,
        organization: null,
        project: null,
        webhookSecret: null,
        // OPENAI_CUSTOM_HEADERS has no option: its headers are cancelled one by one.
        defaultHeaders: customHeaderOverrides("OPENAI_CUSTOM_HEADERS", `Bearer ${apiKey}`),
        // Only to the base URL's origin, never following a redirect (transport.ts).
        fetch: guardedFetch(baseURL, this.info),
        // The runtime retries (call-model.ts), only before output; the SDK must not.
        maxRetries: 0,
        // The SDK must never print anything of a request (headers included).
        logLevel: "off",
      });
    } catch (error) {
      // E.g. OPENAI_CUSTOM_HEADERS naming a header that is not an HTTP token: every request would fail.
      throw this.fail(`openai: the client cannot be configured: ${(error as Error).message}`, false);
    }
    return this.client;
  }

  private fail(message: string, retryable: boolean, extra: ProviderErrorExtra = {}): ProviderError {
    return providerError(message, retryable, extra, this.info, (text) => this.scrub(text));
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
      ...(config.reasoningEffort === undefined
        ? {}
        : {
            reasoning_effort:
              config.reasoningEffort as ChatCompletionCreateParamsStreaming["reasoning_effort"],
          }),
    };
  }

  private throwIfAborted(signal: AbortSignal): void {
    if (signal.aborted) throw this.fail("openai: the request was cancelled", false);
  }

  /** A ProviderError with the server's message (never a stack, never the key). */
  private toProviderError(error: unknown, inStream = false): ProviderError {
    if (error instanceof ProviderError) return error;
    if (error instanceof APIUserAbortError) return this.fail("openai: the request was cancelled", false);
    if (error instanceof APIConnectionError) {
      // A redirect, or a request for another origin, refused by the transport: non-retryable.
      const refused = refusedByTransport(error);
      if (refused) return refused;
      const cause = (error as { cause?: unknown }).cause;
      const detail = cause instanceof Error && cause.message ? ` (${cause.message})` : "";
      return this.fail(`openai: ${error.message}${detail}`, true);
    }
    if (error instanceof APIError) {
      const status = error.status;
      const type = [error.type, error.code].find((v): v is string => typeof v === "string");
      const kind = type === undefined ? {} : { type };
      if (status === undefined) {
        // An error inside the stream: judged like the same error over HTTP.
        const body = error.error as { status?: unknown; code?: unknown; type?: unknown } | undefined;
        const retryable = streamErrorRetryable({ status: body?.status, code: error.code, type: error.type });
        return this.fail(`openai: stream error: ${error.message}`, retryable, kind);
      }
      const retryable = httpErrorRetryable(status, error);
      return this.fail(`openai: ${error.message}`, retryable, {
        status,
        ...kind,
        ...(retryable ? { retryAfterMs: retryAfterMs(error.headers) } : {}),
      });
    }
    const message = error instanceof Error ? error.message : String(error);
    // Anything else is the network failing under us (e.g. undici's "terminated").
    return this.fail(`openai: ${inStream ? "the stream broke" : "the request failed"}: ${message}`, true);
  }

  /** Removes the route's key, the environment's keys and anything shaped like a key from a text. */
  private scrub(text: string): string {
    return scrubSecrets(text, [this.options.apiKey, ...secretValuesFromEnv(process.env)]);
  }
}
