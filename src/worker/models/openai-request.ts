/**
 * History → OpenAI chat completion request (pure): messages, tools and settings
 * (resume-semantics.md §1). Used by the OpenAI provider (openai.ts).
 * - the agent's system prompt is the first `system` message;
 * - `user` and `internal` messages are both sent as `user` messages, verbatim: the runtime's
 *   internal texts (retry/continue instructions) are written to be read as they are, so no
 *   marker is added;
 * - an `assistant` message is replayed with its text, and with its tool calls (arguments
 *   JSON-stringified) only when the step really asked for them (`requestsTools`): a
 *   response cut by a fault (`interrupted`), by the output limit (`max_output`) or
 *   otherwise abnormal may carry half-formed calls that were never run and have no
 *   results, which the provider would reject; a step with no text and no replayed calls (a
 *   `max_output` or `interrupted` step that produced only calls or nothing, a `context_full`
 *   or `refusal` record) is left out, as the Anthropic and Responses requests leave it out:
 *   vLLM and Mistral answer 400 to an assistant message with empty content and no tool calls,
 *   so a resume of such a step (continue_response) or new input after it could never be sent;
 * - a `tool` message is a `tool` message with its `tool_call_id`; a failed result
 *   (`success: false`, e.g. the synthetic "interrupted" results) is prefixed "Error: ";
 * - a tool call id over 40 characters (another provider's, an import's), which OpenAI refuses,
 *   goes out shortened, the same for the call and its result (wire-ids.ts); a call's name
 *   outside `^[a-zA-Z0-9_-]{1,64}$` (a model's `functions.write_file`), which OpenAI refuses
 *   too, goes out rewritten (`openaiToolName`), in the Responses API's requests as well.
 * `reasoningEffort` is sent as `reasoning_effort`.
 */
import type {
  ChatCompletionCreateParamsStreaming,
  ChatCompletionMessageParam,
  ChatCompletionTool,
} from "openai/resources/chat/completions";
import type { z } from "zod";
import type { openaiModelSchema } from "../../shared/agent-config.js";
import type { Message } from "../../shared/messages.js";
import { requestsTools } from "../../shared/resume-point.js";
import type { ModelRequest, ToolSpec } from "./provider.js";
import { openaiChatToolId, openaiToolName } from "./wire-ids.js";

export type OpenAIModelConfig = z.infer<typeof openaiModelSchema>;

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

/** The streamed chat completion request of `request` for the model `config`. */
export function buildChatBody(
  config: OpenAIModelConfig,
  request: ModelRequest,
): ChatCompletionCreateParamsStreaming {
  return {
    model: config.model,
    messages: toOpenAIMessages(request.system, request.history),
    stream: true,
    stream_options: { include_usage: true },
    ...(request.tools.length > 0 ? { tools: toOpenAITools(request.tools) } : {}),
    ...(config.maxTokens === undefined
      ? {}
      : // Compatible servers know `max_tokens`; OpenAI itself wants `max_completion_tokens`.
        config.baseUrl
        ? { max_tokens: config.maxTokens }
        : { max_completion_tokens: config.maxTokens }),
    ...(config.temperature === undefined ? {} : { temperature: config.temperature }),
    ...(config.reasoningEffort === undefined
      ? {}
      : {
          reasoning_effort: config.reasoningEffort as ChatCompletionCreateParamsStreaming["reasoning_effort"],
        }),
  };
}
