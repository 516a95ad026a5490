/**
 * History → Anthropic Messages API request (pure): alternating turns, tool_use and
 * tool_result blocks, tools and settings. Used by the Anthropic provider (anthropic.ts).
 */
import type {
  ContentBlockParam,
  MessageCreateParamsStreaming,
  MessageParam,
  TextBlockParam,
  Tool,
  ToolResultBlockParam,
} from "@anthropic-ai/sdk/resources/messages";
import type { z } from "zod";
import type { anthropicModelSchema } from "../../shared/agent-config.js";
import type { Message } from "../../shared/messages.js";
import { requestsTools } from "../../shared/resume-point.js";
import type { ModelRequest } from "./provider.js";

export const DEFAULT_ANTHROPIC_MAX_TOKENS = 4096;

export type AnthropicModelConfig = z.infer<typeof anthropicModelSchema>;

type Turn = { role: "user" | "assistant"; content: ContentBlockParam[] };

function textBlock(text: string): TextBlockParam {
  return { type: "text", text };
}

/**
 * The history as Messages API turns, which must alternate user/assistant:
 *
 * - `user`, `internal` and `tool` messages in a row form one user turn. Its `tool_result`
 *   blocks come first (the API wants them at the start of the turn), then the text blocks in
 *   history order. An `internal` message is sent verbatim as a text block, without a marker:
 *   its wording (resume-plan.ts) already addresses the model.
 * - A `tool` result is a `tool_result` block (`is_error: true` when `success` is false, which
 *   includes the synthetic "interrupted" results). A result whose call was not replayed as a
 *   `tool_use` block (see below) would be rejected as orphaned; it becomes a text block.
 * - An `assistant` step is a text block (omitted when empty) and, only for a step whose calls
 *   were executed (`requestsTools`: stop reason `tool_use`/`end_turn`), its `tool_use` blocks.
 *   A step cut by a fault (`interrupted`) or by the output limit (`max_output`) replays its
 *   text only. A `paused` step is replayed as it is, so the model continues it.
 * - An assistant step with nothing to send (no text, no replayed calls: e.g. a `context_full`
 *   record) is skipped; assistant steps in a row (consecutive pauses) form one assistant turn.
 * - When the history ends with an assistant turn (a paused step), its last text block loses
 *   trailing whitespace, which the API rejects in a final assistant turn.
 */
export function toAnthropicMessages(history: readonly Message[]): MessageParam[] {
  const turns: Turn[] = [];
  let results: ContentBlockParam[] = [];
  let texts: ContentBlockParam[] = [];
  /** Ids of the `tool_use` blocks of the latest assistant turn: the results they may answer. */
  let openCalls = new Set<string>();

  const push = (role: Turn["role"], content: ContentBlockParam[]) => {
    if (content.length === 0) return;
    const last = turns.at(-1);
    if (last?.role === role) last.content.push(...content);
    else turns.push({ role, content: [...content] });
  };
  const flushUser = () => {
    push("user", [...results, ...texts]);
    results = [];
    texts = [];
  };

  for (const message of history) {
    switch (message.role) {
      case "user":
      case "internal":
        if (message.content !== "") texts.push(textBlock(message.content));
        break;
      case "tool":
        if (openCalls.has(message.toolCallId)) {
          const block: ToolResultBlockParam = { type: "tool_result", tool_use_id: message.toolCallId };
          if (message.content !== "") block.content = message.content;
          if (!message.success) block.is_error = true;
          results.push(block);
          openCalls.delete(message.toolCallId);
        } else {
          const outcome = message.success ? "" : " (failed)";
          texts.push(
            textBlock(
              `Result of tool ${message.name} (call ${message.toolCallId})${outcome}: ${message.content}`,
            ),
          );
        }
        break;
      case "assistant": {
        flushUser();
        const content: ContentBlockParam[] = [];
        if (message.content !== "") content.push(textBlock(message.content));
        const calls = requestsTools(message) ? (message.toolCalls ?? []) : [];
        for (const call of calls)
          content.push({ type: "tool_use", id: call.id, name: call.name, input: call.arguments });
        if (content.length === 0) break;
        openCalls = new Set(calls.map((c) => c.id));
        push("assistant", content);
        break;
      }
      default: {
        const never: never = message;
        return never;
      }
    }
  }
  flushUser();

  const last = turns.at(-1);
  if (last?.role === "assistant") {
    const tail = last.content.at(-1);
    if (tail?.type === "text") {
      tail.text = tail.text.trimEnd();
      if (tail.text === "") last.content.pop();
      if (last.content.length === 0) turns.pop();
    }
  }
  return turns;
}

function toAnthropicTools(request: ModelRequest): Tool[] {
  return request.tools.map((tool) => ({
    name: tool.name,
    description: tool.description,
    input_schema: { type: "object", ...tool.parameters } as Tool.InputSchema,
  }));
}

export function buildAnthropicRequest(
  config: AnthropicModelConfig,
  request: ModelRequest,
): MessageCreateParamsStreaming {
  const body: MessageCreateParamsStreaming = {
    model: config.model,
    max_tokens: config.maxTokens ?? DEFAULT_ANTHROPIC_MAX_TOKENS,
    messages: toAnthropicMessages(request.history),
    stream: true,
  };
  if (request.system) body.system = request.system;
  if (request.tools.length > 0) body.tools = toAnthropicTools(request);
  return body;
}
