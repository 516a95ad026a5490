/**
 * Tool call ids as each provider accepts them back (pure). A history may hold ids another
 * provider minted (a fallback model, an import): OpenAI-compatible servers' ids such as
 * `functions.write_file:0`, long ones such as vLLM's `chatcmpl-tool-<uuid>` or an import's
 * (up to MAX_TOOL_CALL_ID). Sent as they are, the next provider refuses the whole request —
 * Anthropic a `tool_use.id` outside `^[a-zA-Z0-9_-]+$`, OpenAI chat a `tool_calls[].id` over 40
 * characters, the Responses API a `call_id` over 64 — with a 400 that no retry or resume could get past.
 * Names too (`openaiToolName`, `anthropicToolName`): a model may call a tool by a name no
 * provider takes back.
 *
 * So an id the provider would refuse goes out rewritten, the same way every time (a digest of
 * it), for the call and for the result that answers it alike: the pairs stay paired. The
 * history keeps the original ids; an id the provider accepts goes out unchanged.
 */
import { createHash } from "node:crypto";
import type { ToolCall } from "../../shared/messages.js";

/** What the Messages API accepts as a `tool_use` id (and a `tool_result`'s `tool_use_id`). */
const ANTHROPIC_ID = /^[a-zA-Z0-9_-]+$/;

/** The longest `tool_calls[].id` / `tool_call_id` chat completions accepts. */
export const OPENAI_CHAT_MAX_ID = 40;

function digest(id: string): string {
  return createHash("sha256").update(id).digest("hex");
}

/** `id` as a Messages API tool id: kept when valid, else its allowed characters and a digest. */
export function anthropicToolId(id: string): string {
  if (ANTHROPIC_ID.test(id)) return id;
  const kept = id.replace(/[^a-zA-Z0-9_-]+/g, "_").slice(0, 40);
  return `${kept}_${digest(id).slice(0, 16)}`;
}

/** `id` as a chat completions tool call id: kept when short enough, else `call_` and a digest. */
export function openaiChatToolId(id: string): string {
  return id.length <= OPENAI_CHAT_MAX_ID ? id : `call_${digest(id).slice(0, 32)}`;
}

/** What both OpenAI APIs accept as a function name, in `tools` and in a history's calls. */
const OPENAI_TOOL_NAME = /^[a-zA-Z0-9_-]{1,64}$/;

/**
 * A call's name as the OpenAI APIs accept it back: kept when valid, else its allowed
 * characters (at most 47) and a digest, 64 at most. A model may name a call as no tool is
 * named — a compatible server's `functions.write_file`, a channel marker leaked into the name,
 * Claude's names of up to 128 — and the history keeps the call (answered "unknown tool"); sent
 * as it is, chat completions refuses `messages[N].tool_calls[M].function.name` and the
 * Responses API `input[N].name` ("string does not match pattern"), at every retry and resume.
 * No agent's tool is named so (the call names none of them), so the rename confuses none.
 */
export function openaiToolName(name: string): string {
  if (OPENAI_TOOL_NAME.test(name)) return name;
  const kept = name.replace(/[^a-zA-Z0-9_-]+/g, "_").slice(0, 47);
  return `${kept}_${digest(name).slice(0, 16)}`;
}

/**
 * A call's name as the Messages API accepts it back in a `tool_use` block: the same pattern as
 * the OpenAI APIs' (`^[a-zA-Z0-9_-]{1,64}$`: "messages.1.content.1.tool_use.name: String should
 * match pattern" and "… should have at most 64 characters"), so the same rename. A fallback to
 * Claude after an OpenAI-compatible model called `functions.write_file` (answered "unknown
 * tool") sent that name as it was: the 400 came back at every retry and resume, and the
 * session parked, though the fallback was there to carry it on.
 */
export function anthropicToolName(name: string): string {
  return openaiToolName(name);
}

/**
 * The wire id of each of a step's calls: `toWire(id)`, unless an earlier step of the request
 * used it — both the Messages API ("`tool_use` ids must be unique") and the Responses API
 * ("Duplicate item found with id fc_call_0") refuse a request whose call ids repeat, and
 * another provider may repeat its ids from step to step (`call_0`, Kimi's
 * `functions.NAME:0`). A repeat goes out as `toWire` of the id and its repeat count (a
 * digest, since the NUL between them is never kept): the same for the same history.
 */
function distinctWireIds(
  calls: readonly ToolCall[],
  used: Set<string>,
  toWire: (id: string) => string,
): Map<string, string> {
  const ids = new Map<string, string>();
  for (const call of calls) {
    let id = toWire(call.id);
    for (let n = 1; used.has(id); n++) id = toWire(`${call.id}\u0000${n}`);
    used.add(id);
    ids.set(call.id, id);
  }
  return ids;
}

/** `distinctWireIds` for the Messages API. */
export function anthropicWireIds(calls: readonly ToolCall[], used: Set<string>): Map<string, string> {
  return distinctWireIds(calls, used, anthropicToolId);
}

/** The longest `call_id` the Responses API accepts ("string too long … maximum length 64"). */
const OPENAI_RESPONSES_MAX_ID = 64;

/** `id` as a Responses API call id: kept, unless over 64 characters or a repeat (a NUL): then a digest. */
function responsesCallId(id: string): string {
  return id.includes("\u0000") || id.length > OPENAI_RESPONSES_MAX_ID
    ? `call_${digest(id).slice(0, 32)}`
    : id;
}

/** `distinctWireIds` for the Responses API. */
export function responsesWireIds(calls: readonly ToolCall[], used: Set<string>): Map<string, string> {
  return distinctWireIds(calls, used, responsesCallId);
}
