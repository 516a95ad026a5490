/**
 * The Anthropic provider: the Messages API, streamed (resume-semantics.md §6).
 *
 * Request: the history becomes alternating user/assistant turns (see `toAnthropicMessages`,
 * anthropic-messages.ts).
 * The SDK's own retries are off (`maxRetries: 0`): the runtime retries, and only before any
 * output (call-model.ts). The API key comes from the worker's environment and goes to the SDK
 * only; it is never logged, stored or put in an error (errors are scrubbed besides:
 * scrub-secrets.ts). The client takes nothing from the environment: key, auth token, base
 * URL, log level and tracing are given, and ANTHROPIC_CUSTOM_HEADERS is cancelled; it sends
 * only to its base URL and never follows a redirect (transport.ts).
 *
 * Response: the body's events (anthropic-sse.ts: one without its `event:` line, as some proxies
 * send them, is named by its data's `type`) read by anthropic-stream.ts (text, tool calls,
 * usage, thinking kept as the step's `providerState`; a step is whole only with `message_stop`).
 * Errors judged: anthropic-errors.ts. The request: anthropic-request.ts.
 *
 * `temperature` is not sent: SDK 1.x sends API version 2026-10-21, which has no sampling
 * parameters and answers 400 to any `temperature` (even 1.0); the SDK dropped the field too.
 */
import Anthropic from "@anthropic-ai/sdk";
import type { RawMessageStreamEvent } from "@anthropic-ai/sdk/resources/messages";
import { scrubSecrets, secretValuesFromEnv } from "../../shared/scrub-secrets.js";
import { classifyAnthropicError, type Failure } from "./anthropic-errors.js";
import { ANTHROPIC_BASE_URL, type AnthropicModelConfig, buildAnthropicRequest } from "./anthropic-request.js";
import { anthropicEvents } from "./anthropic-sse.js";
import { readAnthropicStream } from "./anthropic-stream.js";
import { withLiveness } from "./body-liveness.js";
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
} from "./provider.js";
import { anthropicHeaderOverrides, guardedFetch, hostOf } from "./transport.js";

export { parseToolInput } from "./anthropic-tool-input.js";

export const MISSING_ANTHROPIC_KEY = "ANTHROPIC_API_KEY is not set in the worker's environment";

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

  /** What a failed request means: a ProviderError to throw, or a full context window (anthropic-errors.ts). */
  private classify(error: unknown): Failure {
    return classifyAnthropicError(error, (message, retryable, extra) => this.fail(message, retryable, extra));
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
        // ANTHROPIC_CUSTOM_HEADERS has no option: its headers are cancelled one by one, each
        // left to the SDK's own value if it sends one (it sends the key as `Authorization: Bearer`).
        defaultHeaders: anthropicHeaderOverrides(),
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
      // The raw response, so that its body shows the stream alive as bytes come (pings
      // included, which the SDK's stream drops: body-liveness.ts), read as the SDK reads it but
      // with unnamed events named by their data's type (anthropic-sse.ts).
      const raw = await client.messages
        .create(buildAnthropicRequest(this.config, request), { signal: request.signal })
        .asResponse();
      events = anthropicEvents(withLiveness(raw, request.alive));
    } catch (error) {
      const failure = this.classify(error);
      if (failure === "context_full") {
        yield { type: "done", stopReason: "context_full" };
        return;
      }
      throw failure;
    }

    yield* readAnthropicStream(events, request, this.config, (message, retryable, extra) =>
      this.fail(message, retryable, extra),
    );
  }
}
