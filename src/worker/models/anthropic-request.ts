/**
 * History → Anthropic Messages API request (pure): the turns (anthropic-messages.ts), tools
 * and settings. Used by the Anthropic provider (anthropic.ts).
 *
 * Thinking (contracts §13): MODEL `thinking` `{"type":"enabled","budgetTokens":N}` is sent as
 * `{"type":"enabled","budget_tokens":N}`, `{"type":"adaptive"}` as it is — except while the
 * last assistant turn asks for tools without a thinking block of its own, which the API
 * refuses with thinking on (`toolTurnWithoutThinking`), as it does a final assistant turn (a
 * paused step being continued) without its thinking block. How a step's stored provider state
 * is replayed (thinking blocks and their signatures): anthropic-messages.ts.
 *
 * Caching (MODEL `cache`, default true): `cache_control: {"type":"ephemeral"}` breakpoints on
 * the system prompt, the last tool and the last cacheable block of the last two user turns —
 * at most 4, the API's limit. The cache then holds the growing history: each request reads
 * what the previous one wrote and writes its new tail.
 */
import type {
  ContentBlockParam,
  MessageCreateParamsStreaming,
  MessageParam,
  Tool,
} from "@anthropic-ai/sdk/resources/messages";
import type { z } from "zod";
import { type anthropicModelSchema, DEFAULT_ANTHROPIC_MAX_TOKENS } from "../../shared/agent-config.js";
import { isThinking, toAnthropicMessages } from "./anthropic-messages.js";
import type { ModelRequest } from "./provider.js";
import { type StateTarget, targetOf } from "./provider-state.js";

export { DEFAULT_ANTHROPIC_MAX_TOKENS };

/** Where the SDK would go by itself; passed explicitly so ANTHROPIC_BASE_URL is never read. */
export const ANTHROPIC_BASE_URL = "https://api.anthropic.com";

/** The API's limit of cache_control breakpoints in one request. */
export const MAX_CACHE_BREAKPOINTS = 4;

export type AnthropicModelConfig = z.infer<typeof anthropicModelSchema>;

function toAnthropicTools(request: ModelRequest): Tool[] {
  return request.tools.map((tool) => ({
    name: tool.name,
    description: tool.description,
    input_schema: { type: "object", ...tool.parameters } as Tool.InputSchema,
  }));
}

/** Where a model's state may be replayed (provider-state.ts). */
export function anthropicTarget(config: AnthropicModelConfig): StateTarget {
  return targetOf("anthropic", "messages", config, ANTHROPIC_BASE_URL);
}

const EPHEMERAL = { type: "ephemeral" } as const;
const UNCACHEABLE = new Set(["thinking", "redacted_thinking"]);

/** Marks the last block of `content` that may carry a breakpoint; false when none may. */
function markLast(content: ContentBlockParam[]): boolean {
  for (let i = content.length - 1; i >= 0; i--) {
    const block = content[i]!;
    if (UNCACHEABLE.has(block.type) || (block.type === "text" && block.text === "")) continue;
    (block as { cache_control?: unknown }).cache_control = EPHEMERAL;
    return true;
  }
  return false;
}

export function buildAnthropicRequest(
  config: AnthropicModelConfig,
  request: ModelRequest,
): MessageCreateParamsStreaming {
  const cache = config.cache !== false;
  const body: MessageCreateParamsStreaming = {
    model: config.model,
    max_tokens: config.maxTokens ?? DEFAULT_ANTHROPIC_MAX_TOKENS,
    messages: toAnthropicMessages(request.history, anthropicTarget(config)),
    stream: true,
  };
  let breakpoints = 0;
  // A prompt of whitespace only is refused as a text block ("system: text content blocks must
  // contain non-whitespace text"): with caching on (the default) every run of such an agent
  // failed. It says nothing to the model, so it is not sent, with or without caching.
  if (request.system !== undefined && request.system.trim() !== "") {
    if (cache) {
      body.system = [{ type: "text", text: request.system, cache_control: EPHEMERAL }];
      breakpoints++;
    } else body.system = request.system;
  }
  if (request.tools.length > 0) {
    const tools = toAnthropicTools(request);
    if (cache) {
      tools[tools.length - 1]!.cache_control = EPHEMERAL;
      breakpoints++;
    }
    body.tools = tools;
  }
  if (cache) {
    // The growing history: the last user turn (what this request adds) and the one before
    // it (where the previous request's cache ends), newest first.
    let marked = 0;
    for (let i = body.messages.length - 1; i >= 0 && marked < 2 && breakpoints < MAX_CACHE_BREAKPOINTS; i--) {
      const turn = body.messages[i]!;
      if (turn.role !== "user" || typeof turn.content === "string") continue;
      if (markLast(turn.content)) {
        breakpoints++;
        marked++;
      }
    }
  }
  if (!toolTurnWithoutThinking(body.messages)) {
    if (config.thinking?.type === "enabled")
      body.thinking = { type: "enabled", budget_tokens: config.thinking.budgetTokens };
    else if (config.thinking?.type === "adaptive") body.thinking = { type: "adaptive" };
  }
  // With thinking off, a final assistant turn (a paused step being continued, say by a
  // fallback without thinking at the same endpoint) may hold no thinking block: "When thinking
  // is disabled, an `assistant` message in the final position cannot contain `thinking`".
  const last = body.messages.at(-1);
  if (!body.thinking && last?.role === "assistant" && typeof last.content !== "string")
    last.content = last.content.filter((block) => !isThinking(block));
  return body;
}

/**
 * Whether the last assistant turn asks for tools, or ends the request (a paused step being
 * continued), without starting with a thinking block. With `thinking` on, the API refuses
 * such a request (400: "a final `assistant` message must start with a thinking block … To
 * avoid this requirement, disable `thinking`"), and no retry or resume could ever send it:
 * the turn was asked by another provider (a fallback), another endpoint, a model without
 * thinking, or its thinking could not be kept. A tool loop is one assistant turn with one
 * thinking setting, so that turn goes on without thinking; the next user turn has it again.
 */
export function toolTurnWithoutThinking(messages: readonly MessageParam[]): boolean {
  const turn = messages.findLast((m) => m.role === "assistant");
  if (!turn || typeof turn.content === "string") return false;
  const continued = turn === messages.at(-1);
  if (!continued && !turn.content.some((block) => block.type === "tool_use")) return false;
  if (isThinking(turn.content[0])) return false;
  // A continued (prefilled) final turn must start with thinking itself, as before.
  if (continued) return true;
  // A tool loop is one assistant turn: a step after tool results that did not think (no
  // interleaved thinking; adaptive thinking skipping it) still belongs to a turn that began
  // with its thinking block, and the API takes that turn with `thinking` on. Without this,
  // one such step turned thinking off for the rest of the loop: each later step, asked
  // without thinking, could not think either.
  const opening = turnOpening(messages);
  return !(opening && typeof opening.content !== "string" && isThinking(opening.content[0]));
}

/**
 * The first assistant message of the last assistant turn: the first after the last user
 * message that answers no tool call (one holding a `tool_result` goes on with the loop).
 */
function turnOpening(messages: readonly MessageParam[]): MessageParam | undefined {
  const userTurn = messages.findLastIndex(
    (m) =>
      m.role === "user" &&
      (typeof m.content === "string" || !m.content.some((block) => block.type === "tool_result")),
  );
  return messages.slice(userTurn + 1).find((m) => m.role === "assistant");
}
