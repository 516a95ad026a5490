/**
 * The OpenAI-compatible provider: chat completions, streamed, for OpenAI itself and for
 * compatible servers (vLLM, Ollama, llama.cpp) through `baseUrl`.
 *
 * History → request: openai-request.ts (resume-semantics.md §1). Stream → events:
 * openai-chat-stream.ts (§6). Errors: openai-errors.ts.
 *
 * A response is whole only with its `finish_reason` chunk and the terminal `data: [DONE]`
 * (§6: a stream that does not finish is `interrupted`; the SDK hides `[DONE]`, so the body
 * is watched on its way in, see sse-done.ts). A stream that ends or breaks before either,
 * after some text, ends without `done` (the runtime records `interrupted`, partial text
 * kept) — a break after `finish_reason` too: the server never said it was finished. If
 * it breaks before any text, nothing reached the caller, so a retryable ProviderError is
 * thrown and the runtime retries the request.
 *
 * MODEL `api: "responses"` uses the Responses API instead (openai-responses.ts): same client,
 * same transport and key rules, same error handling. A model that refuses
 * `include: ["reasoning.encrypted_content"]` or the reasoning items of a history (one that
 * does not reason, e.g. a fallback after a reasoning model of the same endpoint) is asked
 * again without it and without any step's provider state, and so from then on. `reasoningEffort` is sent as
 * `reasoning_effort` here and as `reasoning.effort` there.
 *
 * The client takes nothing from the environment: every option the SDK would read there is
 * given (key, organization, project, base URL, log level), and the headers of
 * OPENAI_CUSTOM_HEADERS are cancelled (transport.ts).
 */
import OpenAI from "openai";
import type { ChatCompletionChunk } from "openai/resources/chat/completions";
import type { ResponseStreamEvent } from "openai/resources/responses/responses";
import { Stream } from "openai/streaming";
import { scrubSecrets, secretValuesFromEnv } from "../../shared/scrub-secrets.js";
import { withLiveness } from "./body-liveness.js";
import { ChatStreamReader } from "./openai-chat-stream.js";
import {
  CONTEXT_LENGTH_PATTERN,
  isContextLengthError,
  openaiProviderError,
  refusesEncryptedReasoning,
} from "./openai-errors.js";
import { buildChatBody, type OpenAIModelConfig } from "./openai-request.js";
import { ResponsesStreamError, ResponsesStreamReader } from "./openai-responses.js";
import { buildResponsesBody } from "./openai-responses-request.js";
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
  streamErrorRetryable,
} from "./provider.js";
import { type StateTarget, targetOf } from "./provider-state.js";
import { RecentSet } from "./recent-set.js";
import { watchForDone } from "./sse-done.js";
import { customHeaderOverrides, guardedFetch, hostOf } from "./transport.js";

export { isContextLengthError, refusesEncryptedReasoning } from "./openai-errors.js";
export type { OpenAIModelConfig } from "./openai-request.js";
export { parseToolArguments, RAW_ARGUMENTS_KEY } from "./openai-tool-calls.js";

export const MISSING_OPENAI_KEY = "OPENAI_API_KEY is not set in the worker's environment";

/** Where the SDK would go by itself; passed explicitly so OPENAI_BASE_URL is never read. */
const OPENAI_BASE_URL = "https://api.openai.com/v1";

/**
 * `target model` of the Responses models known to refuse encrypted reasoning, learnt from
 * their answers (refusesEncryptedReasoning): asked without it from then on in this process.
 * Model names come from users' agent configs: the 64 most recently used are remembered (one
 * forgotten is asked with it once more, refused, and remembered again).
 */
const WITHOUT_ENCRYPTED_REASONING = new RecentSet(64);

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
        .create(buildChatBody(this.config, request), { signal: request.signal })
        .asResponse();
      // Every chunk of the body shows the stream alive, keep-alive comments too (body-liveness.ts).
      const watch = watchForDone(withLiveness(raw, request.alive));
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

    const reader = new ChatStreamReader();
    let streamError: unknown;
    try {
      for await (const chunk of stream) {
        for (const event of reader.read(chunk)) yield event;
      }
    } catch (error) {
      streamError = error;
    }
    this.throwIfAborted(request.signal);

    const { finishReason } = reader;
    if (finishReason === null || !sawDone()) {
      if (reader.textStarted) return; // did not finish after output: no `done`, the runtime records `interrupted`
      if (streamError !== undefined) {
        if (finishReason === null && !reader.callsStarted && isContextLengthError(streamError)) {
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
    for (const event of reader.finish(finishReason)) yield event;
  }

  /** The Responses API (openai-responses-request.ts, openai-responses.ts). */
  private async *streamResponses(request: ModelRequest): AsyncIterable<ModelEvent> {
    const client = this.getClient();
    const model = `${this.target.target} ${this.config.model}`;
    let body = buildResponsesBody(this.config, request, this.target, !WITHOUT_ENCRYPTED_REASONING.has(model));
    let stream: AsyncIterable<ResponseStreamEvent>;
    // The raw response, so that its body shows the stream alive as bytes come (body-liveness.ts).
    const open = async () =>
      Stream.fromSSEResponse<ResponseStreamEvent>(
        withLiveness(
          await client.responses.create(body, { signal: request.signal }).asResponse(),
          request.alive,
        ),
        new AbortController(),
        client,
      );
    try {
      try {
        stream = await open();
      } catch (error) {
        // A model that does not reason refuses encrypted reasoning: nothing was answered, so
        // the same request goes again without it, and this model's next ones go without it.
        if (!body.include || !refusesEncryptedReasoning(error)) throw error;
        WITHOUT_ENCRYPTED_REASONING.add(model);
        body = buildResponsesBody(this.config, request, this.target, false);
        stream = await open();
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
        defaultHeaders: customHeaderOverrides(`Bearer ${apiKey}`),
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

  private throwIfAborted(signal: AbortSignal): void {
    if (signal.aborted) throw this.fail("openai: the request was cancelled", false);
  }

  /** A ProviderError with the server's message (never a stack, never the key): openai-errors.ts. */
  private toProviderError(error: unknown, inStream = false): ProviderError {
    return openaiProviderError(error, inStream, (message, retryable, extra) =>
      this.fail(message, retryable, extra),
    );
  }

  /** Removes the route's key, the environment's keys and anything shaped like a key from a text. */
  private scrub(text: string): string {
    return scrubSecrets(text, [this.options.apiKey, ...secretValuesFromEnv(process.env)]);
  }
}
