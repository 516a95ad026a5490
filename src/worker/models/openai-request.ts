/**
 * History → OpenAI chat completion messages and tools (pure). The rules are in the file
 * comment of openai.ts.
 */
import type { ChatCompletionMessageParam, ChatCompletionTool } from "openai/resources/chat/completions";
import type { Message } from "../../shared/messages.js";
import { requestsTools } from "../../shared/resume-point.js";
import type { ToolSpec } from "./provider.js";
import { openaiChatToolId, openaiToolName } from "./wire-ids.js";

/** The user-side prefix of a failed tool result, so the model sees that it failed. */
export const FAILED_TOOL_PREFIX = "Error: ";

/** History → chat completion messages (see the file comment for the rules). */
export function toOpenAIMessages(
  system: string | undefined,
  history: readonly Message[],
): ChatCompletionMessageParam[] {
  const out: ChatCompletionMessageParam[] = [];
  if (system) out.push({ role: "system", content: system });
  for (const message of history) {
    switch (message.role) {
      case "user":
      case "internal":
        out.push({ role: "user", content: message.content });
        break;
      case "assistant": {
        if (requestsTools(message)) {
          out.push({
            role: "assistant",
            content: message.content,
            tool_calls: (message.toolCalls ?? []).map((call) => ({
              id: openaiChatToolId(call.id),
              type: "function" as const,
              function: { name: openaiToolName(call.name), arguments: JSON.stringify(call.arguments) },
            })),
          });
        } else if (message.content !== "") {
          out.push({ role: "assistant", content: message.content });
        }
        break;
      }
      case "tool":
        out.push({
          role: "tool",
          tool_call_id: openaiChatToolId(message.toolCallId),
          content: message.success ? message.content : `${FAILED_TOOL_PREFIX}${message.content}`,
        });
        break;
    }
  }
  return out;
}

/**
 * The longest tool description OpenAI takes (400 "Invalid 'tools[0].function.description':
 * string too long. Expected a string with maximum length 1024", `string_above_max_length`).
 * A tool's description is the operator's code, not the agent's: the API never sees it, so an
 * agent listing a tool with a longer one could not be refused at creation — every run of it
 * failed instead. Such a description goes out cut (the name and parameters are whole).
 */
export const MAX_OPENAI_TOOL_DESCRIPTION = 1024;

/** `description` cut to MAX_OPENAI_TOOL_DESCRIPTION, never inside a surrogate pair. */
export function openaiToolDescription(description: string): string {
  if (description.length <= MAX_OPENAI_TOOL_DESCRIPTION) return description;
  let end = MAX_OPENAI_TOOL_DESCRIPTION;
  const last = description.charCodeAt(end - 1);
  if (last >= 0xd800 && last <= 0xdbff) end--;
  return description.slice(0, end);
}

/**
 * A tool's JSON Schema as OpenAI takes it: of `type: "object"`. OpenAI refuses a function
 * schema without one ("schema must be a JSON Schema of 'type: \"object\"', got 'type:
 * \"None\"'"), such as the `{}` of a tool without arguments, which Anthropic's request
 * completes itself; so it is completed here too (`properties: {}` when it names none).
 */
export function openaiToolParameters(parameters: Record<string, unknown>): Record<string, unknown> {
  return { type: "object", properties: {}, ...parameters };
}

export function toOpenAITools(tools: readonly ToolSpec[]): ChatCompletionTool[] {
  return tools.map((tool) => ({
    type: "function",
    function: {
      name: tool.name,
      description: openaiToolDescription(tool.description),
      parameters: openaiToolParameters(tool.parameters),
    },
  }));
}
