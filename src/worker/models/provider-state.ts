/**
 * `providerState` of assistant messages (contracts §13): the provider's own blocks that must
 * go back with the history — Anthropic `thinking`/`redacted_thinking` blocks with their
 * signatures, OpenAI Responses reasoning items with `encrypted_content`.
 *
 * Shape (stored verbatim in `messages.provider_state`):
 *
 *     { "provider": "anthropic", "api": "messages",  "target": T, "content": [ ...blocks ] }
 *     { "provider": "openai",    "api": "responses", "target": T, "output":  [ ...items ] }
 *
 * `content` / `output` is the whole step in the order the API returned it (thinking, text,
 * tool_use blocks; reasoning, message, function_call items), so it is replayed in that order.
 *
 * **Same provider** — the state is replayed only to a request of the same `provider`, the
 * same `api` and the same `target`, where `target` is `endpoint:NAME` for a MODEL naming a
 * declared endpoint (FLEET_MODEL_ENDPOINTS), else the base URL the request goes to (the
 * provider's own by default). The model name is not part of it: a provider's signatures and
 * encrypted reasoning are checked by the provider, not by model, and Anthropic insists on the
 * thinking blocks of a tool turn being sent back. Any other request (a fallback to another
 * provider, the chat API, another endpoint) gets the plain history: text and tool calls.
 *
 * A cut-off step (`interrupted`) never carries a state (call-model.ts stores none), and one
 * found on such a step (an imported history) is not replayed.
 *
 * **Too deep** — a state nesting containers deeper than MAX_PROVIDER_STATE_DEPTH (a server's
 * reasoning item 100,000 levels deep) is stored as `{ provider, api, target, omitted }`, the
 * step otherwise whole (storableState): the walks after it (sanitizeJson, JSON.stringify, a
 * request body's) recurse and would overflow the stack, and the step would end `interrupted`
 * on every resume. Without its `content` / `output` nothing of it is replayed: the history
 * goes back plain, as to another provider.
 */
import { findInJson } from "../../shared/json-walk.js";
import type { AssistantMessage, ProviderState } from "../../shared/messages.js";
import { MAX_TOOL_ARGUMENT_DEPTH } from "./openai-tool-calls.js";

/** The deepest nesting of a state kept (its root object first): a tool call's arguments' bound. */
export const MAX_PROVIDER_STATE_DEPTH = MAX_TOOL_ARGUMENT_DEPTH;

/** `state` as it may be stored: itself, or the note of why it was left out (see the file comment). */
export function storableState(state: ProviderState): ProviderState {
  const tooDeep = findInJson(state, (item, _key, depth) =>
    item !== null && typeof item === "object" && depth >= MAX_PROVIDER_STATE_DEPTH ? "stop" : undefined,
  );
  if (tooDeep === undefined) return state;
  const { provider, api, target } = state;
  return { provider, api, target, omitted: `nested deeper than ${MAX_PROVIDER_STATE_DEPTH} levels` };
}

export type StateTarget = {
  provider: "anthropic" | "openai";
  api: "messages" | "chat" | "responses";
  target: string;
};

/** Where requests go, as `target` names it (see the file comment). */
export function targetOf(
  provider: StateTarget["provider"],
  api: StateTarget["api"],
  config: { endpoint?: string; baseUrl?: string },
  defaultBaseUrl: string,
): StateTarget {
  if (config.endpoint !== undefined) return { provider, api, target: `endpoint:${config.endpoint}` };
  const base = config.baseUrl ?? defaultBaseUrl;
  let target: string;
  try {
    target = new URL(base).href.replace(/\/+$/, "");
  } catch {
    target = base;
  }
  return { provider, api, target };
}

/** A new state for `target` holding `fields`. */
export function makeState(target: StateTarget, fields: Record<string, unknown>): ProviderState {
  return { provider: target.provider, api: target.api, target: target.target, ...fields };
}

/** The message's state when it may be replayed to `target`, else undefined. */
export function replayableState(message: AssistantMessage, target: StateTarget): ProviderState | undefined {
  const state = message.providerState;
  if (!state || message.stopReason === "interrupted") return undefined;
  return state.provider === target.provider && state.api === target.api && state.target === target.target
    ? state
    : undefined;
}

/**
 * About how many characters `value` takes as JSON: its strings and keys, and one for each
 * other value. An iterative walk (findInJson), so a state of any nesting is measured.
 */
export function jsonChars(value: unknown): number {
  let chars = 0;
  findInJson(value, (item, key) => {
    chars += (typeof key === "string" ? key.length : 0) + (typeof item === "string" ? item.length : 1);
    return undefined;
  });
  return chars;
}

/** `value` as an array of JSON objects, or undefined when it is not one. */
export function objectArray(value: unknown): Record<string, unknown>[] | undefined {
  if (!Array.isArray(value)) return undefined;
  return value.every((v) => typeof v === "object" && v !== null && !Array.isArray(v))
    ? (value as Record<string, unknown>[])
    : undefined;
}
