/**
 * History → Anthropic Messages API turns (pure): alternating turns, tool_use and tool_result
 * blocks. Used by the request (anthropic-request.ts).
 *
 * An assistant step whose `providerState` was written by the same provider, api and target
 * (provider-state.ts) is replayed from it: its blocks verbatim and in their order (thinking,
 * redacted_thinking, text, tool_use), the thinking blocks byte for byte with their signatures,
 * as the API requires of a tool turn; each tool_use block is the step's stored call (same
 * order). A thinking block stored without a signature (the stream sent no `signature_delta`, as
 * when `max_tokens` stops the model mid-thought) is left out: the API rejects it unsigned.
 */
import type {
  ContentBlockParam,
  MessageParam,
  TextBlockParam,
  ToolResultBlockParam,
  ToolUseBlockParam,
} from "@anthropic-ai/sdk/resources/messages";
import type { AssistantMessage, Message, ToolCall } from "../../shared/messages.js";
import { requestsTools } from "../../shared/resume-point.js";
import { objectArray, replayableState, type StateTarget } from "./provider-state.js";
import { anthropicToolId, anthropicToolName, anthropicWireIds } from "./wire-ids.js";

type Turn = { role: "user" | "assistant"; content: ContentBlockParam[] };

function textBlock(text: string): TextBlockParam {
  return { type: "text", text };
}

/**
 * A stored call as a `tool_use` block under its wire id (`anthropicWireIds`) and a name the
 * API takes back (`anthropicToolName`: another provider's model may have named it otherwise).
 */
function toolUse(call: ToolCall, ids: ReadonlyMap<string, string>): ToolUseBlockParam {
  return {
    type: "tool_use",
    id: ids.get(call.id) ?? anthropicToolId(call.id),
    name: anthropicToolName(call.name),
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
 *   call and its result alike (wire-ids.ts); so is a call's name outside `^[a-zA-Z0-9_-]{1,64}$`.
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

export const isThinking = (block: ContentBlockParam | undefined) =>
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
