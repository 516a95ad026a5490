/**
 * A Messages API `tool_use` block's input as a stored call's arguments (used by
 * anthropic-stream.ts): the JSON its `input_json_delta`s gathered, else the `input` its start
 * carried. Input that is not a JSON object, or nests past MAX_TOOL_ARGUMENT_DEPTH, is kept as
 * its text under `_raw`, as openai-tool-calls.ts does, so nothing the model wrote is lost.
 */
import type { ToolCall } from "../../shared/messages.js";
import { nestsTooDeep } from "./openai-tool-calls.js";

/** A tool_use block's accumulated input as a call. */
export function toolCall(block: { id: string; name: string; json: string; input: unknown }): ToolCall {
  return { id: block.id, name: block.name, arguments: parseToolInput(block.json, block.input) };
}

export function parseToolInput(json: string, initial: unknown): Record<string, unknown> {
  if (json.trim() === "") return isObject(initial) && !nestsTooDeep(initial) ? initial : {};
  try {
    const parsed: unknown = JSON.parse(json);
    return isObject(parsed) && !nestsTooDeep(parsed) ? parsed : { _raw: json };
  } catch {
    return { _raw: json };
  }
}

function isObject(value: unknown): value is Record<string, unknown> {
  return typeof value === "object" && value !== null && !Array.isArray(value);
}
