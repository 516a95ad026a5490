/**
 * Tool calls of an OpenAI-compatible stream: fragments assembled by index into whole calls
 * (used by openai-chat-stream.ts). Arguments that are not a JSON object are kept under `_raw`
 * so nothing the model wrote is lost; whole arguments a server sent again as a last fragment
 * count once (`assembledArguments`).
 */
import { randomUUID } from "node:crypto";
import type { ChatCompletionChunk } from "openai/resources/chat/completions";
import { findInJson } from "../../shared/json-walk.js";
import type { ToolCall } from "../../shared/messages.js";

/** Where the arguments of a tool call that are not a JSON object are kept. */
export const RAW_ARGUMENTS_KEY = "_raw";

/**
 * The deepest nesting of a tool call's parsed arguments (containers, the arguments object
 * first), as the API allows in what users send (request-checks.ts MAX_JSON_DEPTH): deeper
 * arguments are kept as their text under `_raw`, since the walks after (JSON.stringify,
 * sanitizeJson, a store's or a tool's) recurse and would overflow the stack on 100,000 levels.
 */
export const MAX_TOOL_ARGUMENT_DEPTH = 100;

/** Whether `value` nests containers deeper than MAX_TOOL_ARGUMENT_DEPTH (an iterative walk). */
export function nestsTooDeep(value: unknown): boolean {
  return (
    findInJson(value, (item, _key, depth) =>
      item !== null && typeof item === "object" && depth >= MAX_TOOL_ARGUMENT_DEPTH ? "stop" : undefined,
    ) !== undefined
  );
}

/**
 * Parses a tool call's arguments; anything but a JSON object (or one nested deeper than
 * MAX_TOOL_ARGUMENT_DEPTH) is kept verbatim under `_raw`.
 */
export function parseToolArguments(raw: string): Record<string, unknown> {
  if (raw.trim() === "") return {};
  try {
    const value: unknown = JSON.parse(raw);
    if (value !== null && typeof value === "object" && !Array.isArray(value) && !nestsTooDeep(value)) {
      return value as Record<string, unknown>;
    }
  } catch {
    // fall through: kept raw
  }
  return { [RAW_ARGUMENTS_KEY]: raw };
}

/** A call being assembled; `last`: the latest fragment of its arguments. */
type PartialCall = { id: string; name: string; arguments: string; last: string };

/**
 * A streamed call's arguments: its fragments joined, parsed (parseToolArguments). Some
 * OpenAI-compatible servers send the whole arguments once more as a last fragment after
 * streaming them (vLLM's end-of-stream flush under some tool parsers: xlam, GLM's final chunk),
 * so the join reads `{…}{…}` or `{{…}`: no JSON, and the call's tool refused it at every call.
 * When the join does not parse but that last fragment alone is a JSON object, it is the
 * server's whole arguments and the call's, provided what came before it is its start or all of
 * it. A model's own bad JSON stays `_raw` (its last fragment is the end of it, not a whole
 * object).
 */
export function assembledArguments(joined: string, last: string): Record<string, unknown> {
  const parsed = parseToolArguments(joined);
  if (parsed[RAW_ARGUMENTS_KEY] !== joined || last === joined || last.trim() === "") return parsed;
  // Only a resend: what came before it is its start (`{`, part of it) or all of it. Two calls a
  // server sent at one index without ids (`{"path":"a"}{"path":"b"}`) stay `_raw`, both seen.
  if (!last.startsWith(joined.slice(0, joined.length - last.length))) return parsed;
  const resent = parseToolArguments(last);
  return resent[RAW_ARGUMENTS_KEY] === last ? parsed : resent;
}

/**
 * A fragment's field when it is a string, else nothing: a server may send a number where the
 * API has a string (the SDK checks nothing), and a call's id, name or arguments must be text —
 * an id of 42 made the whole step fail to store (step-message.ts), and was recorded as cut.
 */
function text(value: unknown): string | undefined {
  return typeof value === "string" ? value : undefined;
}

/**
 * A fragment's arguments as text: some compatible servers send the arguments object itself
 * instead of its JSON text, which appended as it was became "[object Object]" (kept under
 * `_raw`, what the model wrote lost). Nested past MAX_TOOL_ARGUMENT_DEPTH, it is not written
 * out (JSON.stringify recurses): the call gets `{}`, as for no arguments.
 */
export function argumentsText(value: unknown): string | undefined {
  if (typeof value === "string") return value;
  if (value === null || typeof value !== "object" || nestsTooDeep(value)) return undefined;
  return JSON.stringify(value);
}

/** Assembles streamed tool call fragments by their index. */
export class ToolCallAssembler {
  private readonly calls = new Map<number, PartialCall>();
  /** A fragment with a new id at an index already used starts a new call (some servers reuse index 0). */
  private readonly slotOf = new Map<number, number>();
  private nextSlot = 0;

  get started(): boolean {
    return this.calls.size > 0;
  }

  /** Adds a fragment; returns how many characters of name and arguments it carried. */
  add(fragment: ChatCompletionChunk.Choice.Delta.ToolCall): number {
    let slot = this.slotOf.get(fragment.index);
    const current = slot === undefined ? undefined : this.calls.get(slot);
    const id = text(fragment.id);
    if (slot === undefined || (id && current?.id && id !== current.id)) {
      slot = this.nextSlot++;
      this.slotOf.set(fragment.index, slot);
      this.calls.set(slot, { id: "", name: "", arguments: "", last: "" });
    }
    return this.append(slot, id, text(fragment.function?.name), argumentsText(fragment.function?.arguments));
  }

  /** The legacy `function_call` delta: one call. */
  addLegacy(fragment: ChatCompletionChunk.Choice.Delta.FunctionCall): number {
    let slot = this.slotOf.get(-1);
    if (slot === undefined) {
      slot = this.nextSlot++;
      this.slotOf.set(-1, slot);
      this.calls.set(slot, { id: "", name: "", arguments: "", last: "" });
    }
    return this.append(slot, undefined, text(fragment.name), argumentsText(fragment.arguments));
  }

  private append(slot: number, id?: string, name?: string, args?: string): number {
    const call = this.calls.get(slot)!;
    if (id) call.id = id;
    // Names arrive whole in practice; a server that repeats the name must not double it.
    if (name && name !== call.name) call.name = call.name ? call.name + name : name;
    if (args) {
      call.arguments += args;
      call.last = args;
    }
    return (typeof name === "string" ? name.length : 0) + (typeof args === "string" ? args.length : 0);
  }

  /** The whole calls, in order. A call without a name cannot be run or answered: dropped. */
  complete(): ToolCall[] {
    const out: ToolCall[] = [];
    const seen = new Set<string>();
    for (const [slot, call] of [...this.calls.entries()].sort((a, b) => a[0] - b[0])) {
      if (!call.name) continue;
      let id = call.id || `call_${randomUUID().slice(0, 8)}_${slot}`;
      if (seen.has(id)) id = `${id}_${slot}`;
      seen.add(id);
      out.push({ id, name: call.name, arguments: assembledArguments(call.arguments, call.last) });
    }
    return out;
  }
}
