/**
 * The model provider interface, shaped for real providers: a request streams events (text
 * deltas, complete tool calls, a final stop reason with usage) and honours an AbortSignal.
 * A stream that ends without `done` broke: the runtime records it as `interrupted`.
 */
import type { Message, ToolCall, Usage } from "../../shared/messages.js";

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
};

export type ModelEvent =
  | { type: "text"; delta: string }
  | { type: "tool_call"; call: ToolCall }
  /** `stopReason` is already normalised (stop-reasons.ts); unknown values verbatim. */
  | { type: "done"; stopReason: string; usage?: Usage };

export interface ModelProvider {
  stream(request: ModelRequest): AsyncIterable<ModelEvent>;
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

/**
 * A failed model request. `retryable` says whether the same request may succeed later
 * (connection errors, 429, 5xx); the runtime retries only while no output has arrived.
 */
export class ProviderError extends Error {
  override name = "ProviderError";
  constructor(
    message: string,
    readonly retryable: boolean,
    readonly retryAfterMs?: number,
  ) {
    super(message);
  }
}

/** Milliseconds a `retry-after-ms` or `retry-after` (seconds or an HTTP date) header asks for. */
export function retryAfterMs(headers: Headers | undefined, now = Date.now()): number | undefined {
  const ms = Number.parseFloat(headers?.get("retry-after-ms") ?? "");
  if (Number.isFinite(ms) && ms >= 0) return Math.round(ms);
  const value = headers?.get("retry-after")?.trim();
  if (!value) return undefined;
  if (/^\d+(\.\d+)?$/.test(value)) return Math.round(Number.parseFloat(value) * 1000);
  const date = Date.parse(value);
  return Number.isNaN(date) ? undefined : Math.max(0, date - now);
}
