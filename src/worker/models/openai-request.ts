/**
 * History → OpenAI chat completion messages and tools (pure). The rules are in the file
 * comment of openai.ts.
 */
import type { ChatCompletionMessageParam, ChatCompletionTool } from "openai/resources/chat/completions";
import type { Message } from "../../shared/messages.js";
import { requestsTools } from "../../shared/resume-point.js";
import type { ToolSpec } from "./provider.js";
import { openaiChatToolId } from "./wire-ids.js";

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
              function: { name: call.name, arguments: JSON.stringify(call.arguments) },
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

export function toOpenAITools(tools: readonly ToolSpec[]): ChatCompletionTool[] {
  return tools.map((tool) => ({
    type: "function",
    function: { name: tool.name, description: tool.description, parameters: tool.parameters },
  }));
}
