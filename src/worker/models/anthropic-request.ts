/**
 * History → Anthropic Messages API request (pure): alternating turns, tool_use and
 * tool_result blocks, tools and settings. Used by the Anthropic provider (anthropic.ts).
 *
 * Thinking (contracts §13): MODEL `thinking` `{"type":"enabled","budgetTokens":N}` is sent as
 * `{"type":"enabled","budget_tokens":N}`, `{"type":"adaptive"}` as it is — except while the
 * last assistant turn asks for tools without a thinking block of its own, which the API
 * refuses with thinking on (`toolTurnWithoutThinking`), as it does a final assistant turn (a
 * paused step being continued) without its thinking block. An assistant step
 * whose `providerState` was written by the same provider, api and target (provider-state.ts)
 * is replayed from it: its blocks verbatim and in their order (thinking, redacted_thinking,
 * text, tool_use), the thinking blocks byte for byte with their signatures, as the API
 * requires of a tool turn; each tool_use block is the step's stored call (same order). A
 * thinking block stored without a signature (the stream sent no `signature_delta`, as when
 * `max_tokens` stops the model mid-thought) is left out: the API rejects it unsigned.
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
  TextBlockParam,
  Tool,
  ToolResultBlockParam,
  ToolUseBlockParam,
} from "@anthropic-ai/sdk/resources/messages";
import type { z } from "zod";
import { type anthropicModelSchema, DEFAULT_ANTHROPIC_MAX_TOKENS } from "../../shared/agent-config.js";
import type { AssistantMessage, Message, ToolCall } from "../../shared/messages.js";
import { requestsTools } from "../../shared/resume-point.js";
import type { ModelRequest } from "./provider.js";
import { objectArray, replayableState, type StateTarget, targetOf } from "./provider-state.js";
import { anthropicToolId, anthropicWireIds } from "./wire-ids.js";

export { DEFAULT_ANTHROPIC_MAX_TOKENS };

/** Where the SDK would go by itself; passed explicitly so ANTHROPIC_BASE_URL is never read. */
export const ANTHROPIC_BASE_URL = "https://api.anthropic.com";

/** The API's limit of cache_control breakpoints in one request. */
export const MAX_CACHE_BREAKPOINTS = 4;

export type AnthropicModelConfig = z.infer<typeof anthropicModelSchema>;

type Turn = { role: "user" | "assistant"; content: ContentBlockParam[] };

function textBlock(text: string): TextBlockParam {
  return { type: "text", text };
}

/** A stored call as a `tool_use` block under its wire id (`anthropicWireIds`). */
function toolUse(call: ToolCall, ids: ReadonlyMap<string, string>): ToolUseBlockParam {
  return {
    type: "tool_use",
    id: ids.get(call.id) ?? anthropicToolId(call.id),
    name: call.name,
    input: call.arguments,
  };
}

/**
 * The history as Messages API turns, which must alternate user/assistant:
 *
 * - `user`, `internal` and `tool` messages in a row form one user turn. Its `tool_result`
 *   blocks come first (the API wants them at the start of the turn), then the text blocks in
 *   history order. An `internal` message is sent verbatim as a text block, without a marker:
 *   its wording (resume-plan.ts) already addresses the model.
 * - Tool ids go out as the API accepts them (`^[a-zA-Z0-9_-]+$`, unique across the request):
 *   another provider's id that is not, or that an earlier step used, is rewritten, for the
 *   call and its result alike (wire-ids.ts).
 * - A `tool` result is a `tool_result` block (`is_error: true` when `success` is false, which
 *   includes the synthetic "interrupted" results); one whose output is empty or only
 *   whitespace has no `content` (the API refuses it as a text block). A result whose call was not replayed as a
 *   `tool_use` block (see below) would be rejected as orphaned; it becomes a text block.
 * - An `assistant` step is a text block (omitted when empty) and, only for a step whose calls
 *   were executed (`requestsTools`: stop reason `tool_use`/`end_turn`), its `tool_use` blocks.
 *   A step cut by a fault (`interrupted`) or by the output limit (`max_output`) replays its
 *   text only. A `paused` step is replayed as it is, so the model continues it.
 * - An assistant step with nothing to send (no text — or whitespace only, which the API refuses
 *   as a text block —, no replayed calls: e.g. a `context_full` record, a step cut right after
 *   its leading newlines) is skipped; assistant steps in a row (consecutive pauses) form one
 *   assistant turn, which holds thinking blocks only if it starts with one (`joinable`).
 * - A `user` or `internal` text of whitespace only is left out of its turn (the API refuses
 *   it), unless it is all the history's last turn holds; so is a whitespace-only text block of
 *   a replayed provider state.
 * - When the history ends with an assistant turn (a paused step), its last text block loses
 *   trailing whitespace, and trailing thinking blocks go: the API rejects either at the end of
 *   a final assistant turn.
 */
export function toAnthropicMessages(history: readonly Message[], target?: StateTarget): MessageParam[] {
  const turns: Turn[] = [];
  let results: ContentBlockParam[] = [];
  let texts: ContentBlockParam[] = [];
  /** Ids of the `tool_use` blocks of the latest assistant turn (stored id → wire id): the results they may answer. */
  let openCalls = new Map<string, string>();
  /** Wire ids of the `tool_use` blocks sent so far. */
  const used = new Set<string>();

  const push = (role: Turn["role"], content: ContentBlockParam[]) => {
    if (content.length === 0) return;
    const last = turns.at(-1);
    if (last?.role === role) last.content.push(...content);
    else turns.push({ role, content: [...content] });
  };
  /**
   * The user turn gathered so far. A text block of whitespace only is refused ("text content
   * blocks must contain non-whitespace text") unless the turn holds other text, so it is left
   * out: a user message `" "` another provider answered would otherwise make every later
   * request of the session a 400. Only a last turn that holds nothing else keeps it (sending
   * nothing would leave the model to continue its own answer): the provider's 400 then names it.
   */
  const flushUser = (last = false) => {
    const said = texts.filter((block) => block.type !== "text" || block.text.trim() !== "");
    push("user", [...results, ...(last && said.length === 0 && results.length === 0 ? texts : said)]);
    results = [];
    texts = [];
  };

  for (const message of history) {
    switch (message.role) {
      case "user":
      case "internal":
        if (message.content !== "") texts.push(textBlock(message.content));
        break;
      case "tool": {
        const wireId = openCalls.get(message.toolCallId);
        if (wireId !== undefined) {
          const block: ToolResultBlockParam = { type: "tool_result", tool_use_id: wireId };
          // String content is a text block to the API, refused empty or of whitespace only
          // (a shell tool's "\n"): such a result goes without content, as an empty one does.
          if (message.content.trim() !== "") block.content = message.content;
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
      }
      case "assistant": {
        flushUser();
        const calls = requestsTools(message) ? (message.toolCalls ?? []) : [];
        const ids = anthropicWireIds(calls, used);
        const content = (target && fromState(message, calls, ids, target)) ?? [];
        if (content.length === 0) {
          // The API refuses a text block of whitespace only ("text content blocks must contain
          // non-whitespace text"): a cut step that streamed only newlines goes without it.
          if (message.content.trim() !== "") content.push(textBlock(message.content));
          for (const call of calls) content.push(toolUse(call, ids));
        }
        if (content.length === 0) break;
        openCalls = ids;
        push("assistant", joinable(turns.at(-1), content));
        break;
      }
      default: {
        const never: never = message;
        return never;
      }
    }
  }
  flushUser(true);

  const last = turns.at(-1);
  if (last?.role === "assistant") {
    // A final assistant turn may end neither with whitespace nor with a thinking block ("The
    // final block in an assistant message cannot be `thinking`"): a step paused right after
    // its thinking has nothing there for the model to continue from.
    for (let tail = last.content.at(-1); tail; tail = last.content.at(-1)) {
      if (tail.type === "text") tail.text = tail.text.trimEnd();
      if (!isThinking(tail) && !(tail.type === "text" && tail.text === "")) break;
      last.content.pop();
    }
    if (last.content.length === 0) turns.pop();
  }
  return turns;
}

const isThinking = (block: ContentBlockParam | undefined) =>
  block?.type === "thinking" || block?.type === "redacted_thinking";

/**
 * A step's `content` as it may join the assistant turn `last` (a paused step before it): the
 * API refuses an assistant message that holds a thinking block but does not start with one
 * ("If an assistant message contains any thinking blocks, the first block must be thinking"),
 * so after a step that began without thinking (adaptive thinking skipped it; another target's
 * step) the later step's thinking blocks stay out.
 */
function joinable(last: Turn | undefined, content: ContentBlockParam[]): ContentBlockParam[] {
  if (last?.role !== "assistant" || isThinking(last.content[0])) return content;
  return content.filter((block) => !isThinking(block));
}

/**
 * An assistant step's blocks from its provider state, in their order; tool_use blocks are the
 * replayed calls, in order (none for a step whose calls were not executed). Undefined when
 * the state is not for `target` or holds no blocks.
 */
function fromState(
  message: AssistantMessage,
  calls: AssistantMessage["toolCalls"] & {},
  ids: ReadonlyMap<string, string>,
  target: StateTarget,
): ContentBlockParam[] | undefined {
  const state = replayableState(message, target);
  const blocks = objectArray(state?.content);
  if (!blocks || blocks.length === 0) return undefined;
  const content: ContentBlockParam[] = [];
  let next = 0;
  for (const block of blocks) {
    switch (block.type) {
      case "thinking":
        // A block whose signature never came (no `signature_delta`: `max_tokens` cut the
        // thinking short) cannot be verified: the API refuses it (400), so it stays out.
        if (typeof block.signature === "string" && block.signature !== "")
          content.push(block as unknown as ContentBlockParam);
        break;
      case "redacted_thinking":
        content.push(block as unknown as ContentBlockParam);
        break;
      case "text":
        // A text block of whitespace only (the model's "\n\n" before its tool_use) is refused
        // when the request replays it: the step would fail the session's every later request.
        if (typeof block.text === "string" && block.text.trim() !== "") content.push(textBlock(block.text));
        break;
      case "tool_use": {
        const call = calls[next++];
        if (call) content.push(toolUse(call, ids));
        break;
      }
      default:
        break;
    }
  }
  for (const call of calls.slice(next)) content.push(toolUse(call, ids));
  return content;
}

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
