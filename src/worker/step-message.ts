/**
 * A model step as it will be stored (call-model.ts, the one boundary every provider passes
 * through, contracts §12): its text, tool calls and stop reason sanitised, its tool call ids
 * storable and distinct, its provider state kept only on a whole step, and only as deep as it
 * may be stored (provider-state.ts storableState). Pure.
 */
import { createHash } from "node:crypto";
import {
  type AssistantMessage,
  MAX_TOOL_CALL_ID,
  type ProviderState,
  type ToolCall,
  type Usage,
} from "../shared/messages.js";
import { storableState } from "./models/provider-state.js";
import { sanitizeJson, sanitizeText } from "./models/sanitize-text.js";

/**
 * The step as it will be stored: every string in it sanitised. `usage` as the provider gave
 * it: `null` when it reported none (unknown, never 0 tokens), absent for a model without
 * tokens (scripted) and for a step cut short (`interrupted`: no final event, no usage).
 */
export function assistant(
  content: string,
  calls: ToolCall[],
  stopReason: string,
  usage?: Usage | null,
  providerState?: ProviderState,
): AssistantMessage {
  return {
    role: "assistant",
    content: sanitizeText(content),
    ...(calls.length > 0 ? { toolCalls: sanitizeCalls(calls) } : {}),
    stopReason: sanitizeText(stopReasonText(stopReason)),
    ...(usage === undefined ? {} : { usage }),
    ...(providerState === undefined || stopReason === "interrupted"
      ? {}
      : { providerState: sanitizeJson(storableState(providerState)) }),
  };
}

/**
 * The stop reason as text. A provider may send a number or an object where its API has a
 * string (JSON allows it; the SDKs check nothing): such a value is an unknown stop reason like
 * any other, kept as its JSON text (resume-semantics §6), never a non-string that the
 * classifier and the store would fail on (the run crashed, at every resume).
 */
function stopReasonText(value: unknown): string {
  if (typeof value === "string") return value;
  try {
    return JSON.stringify(value) ?? String(value);
  } catch {
    // Nested past what JSON.stringify's recursion takes: its kind is all that can be said.
    return `(${Array.isArray(value) ? "array" : typeof value} too deep to write)`;
  }
}

/**
 * The calls with their strings sanitised and their ids distinct: results are matched to
 * calls by id, and a step that asked twice under one id (a model's mistake, or two ids
 * that sanitising made equal) would otherwise leave one call unanswerable — the second
 * result of an id is refused by the store. A repeated id gets a `_<index>` suffix; an id too
 * long to store, a digest (storableId); an empty one, `call_<index>`.
 */
function sanitizeCalls(calls: ToolCall[]): ToolCall[] {
  const seen = new Set<string>();
  const all = new Set(calls.map((call) => storableId(call.id)));
  return calls.map((call, i) => {
    // No id at all (a server that sent none): one is given, as a stored id is never empty (messages.ts).
    let id = storableId(call.id) || `call_${i}`;
    if (seen.has(id) || (call.id === "" && all.has(id))) {
      let n = i;
      while (all.has(`${id}_${n}`)) n++;
      id = `${id}_${n}`;
      all.add(id);
    }
    seen.add(id);
    const name = sanitizeText(call.name);
    const args = sanitizeJson(call.arguments);
    return id === call.id && name === call.name && args === call.arguments
      ? call
      : { ...call, id, name, arguments: args };
  });
}

/**
 * The id sanitised, and one too long to store (over MAX_TOOL_CALL_ID) replaced by a digest of
 * it: the same for the same id, so a call and the result that answers it still pair up.
 */
function storableId(id: string): string {
  const clean = sanitizeText(id);
  if (clean.length <= MAX_TOOL_CALL_ID) return clean;
  return `call_${createHash("sha256").update(clean).digest("hex").slice(0, 32)}`;
}
