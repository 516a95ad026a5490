/**
 * What the real providers refuse (400) about the structure of a request's history, written down
 * from their documented rules, as pure validators over a request body: each returns the list of
 * the rules a body breaks (empty when the provider would take it). The fakes (fake-anthropic.ts,
 * fake-openai.ts, fake-openai-responses.ts) check what they were taught one defect at a time;
 * these check a whole request at once, so a test can hold every request a resume builds to them.
 *
 * Anthropic Messages API (tool-use and extended-thinking guides, Messages API reference):
 * - `messages` is not empty ("messages: at least one message is required"). Roles need not
 *   alternate (the API combines consecutive same-role messages into one turn); whether a first
 *   message of the `assistant` role is refused is not documented either way, so it is not a rule
 *   here;
 * - every `tool_use` of an assistant message is answered by a `tool_result` in the very next
 *   message, a user message ("tool_use ids were found without tool_result blocks immediately
 *   after"), whose `tool_result` blocks come before any other block ("tool_result blocks must
 *   come FIRST in the content array"); every `tool_result` answers a `tool_use` of the message
 *   right before it; `tool_use` only in assistant messages, `tool_result` only in user ones;
 *   `tool_use` ids unique and `^[a-zA-Z0-9_-]+$`; a `tool_use` name, in the history as in
 *   `tools`, `^[a-zA-Z0-9_-]{1,64}$` (the API answers "messages.1.content.1.tool_use.name: String
 *   should match pattern '^[a-zA-Z0-9_-]{1,64}$'", and "… should have at most 64 characters");
 * - no text block empty, nor of whitespace only unless its message holds other text (a
 *   `tool_result`'s string content is a text block of its own);
 * - thinking: a `thinking` block carries a non-empty `signature`; an assistant message holding
 *   thinking blocks starts with one; with `thinking` on, the assistant turn of the last tool
 *   loop starts with its thinking block, and so does a final assistant message (a paused turn
 *   being continued); a final assistant message holds no thinking with thinking off and never
 *   ends with one; `budget_tokens` ≥ 1024 and < `max_tokens`;
 * - at most 4 `cache_control` breakpoints, none on a thinking block;
 * - a final assistant message (a prefill) does not end with whitespace.
 *
 * OpenAI chat completions:
 * - an assistant message's `tool_calls` is absent or not empty, and is followed at once by
 *   exactly one `tool` message per id ("An assistant message with 'tool_calls' must be followed
 *   by tool messages responding to each 'tool_call_id'"), before any other message;
 * - a `tool` message answers a call of the assistant message its run of tool messages follows
 *   ("messages with role 'tool' must be a response to a preceeding message with 'tool_calls'");
 * - an assistant message without tool calls has content (a string, not empty);
 * - a call id is at most 40 characters; a function name `^[a-zA-Z0-9_-]{1,64}$`.
 *
 * OpenAI Responses API with `store: false`:
 * - no `previous_response_id` and no `item_reference` (nothing is stored to refer to);
 * - every `function_call` has exactly one `function_call_output` of its `call_id` after it
 *   ("No tool output found for function call …"), and every output a call before it;
 *   `call_id`s unique among calls and at most 64 characters;
 * - a `reasoning` item carries its `encrypted_content` (with `store: false` an item without it
 *   is looked up by id: "Item with id 'rs_…' not found. Items are not persisted when `store`
 *   is set to false") and is followed by the item it led to, a `message` or a `function_call`
 *   ("… was provided without its required following item"); `include` asks for
 *   `reasoning.encrypted_content` whenever reasoning items are sent.
 */

type Json = Record<string, unknown>;

const blocksOf = (content: unknown): Json[] => (Array.isArray(content) ? (content as Json[]) : []);
const isThinkingBlock = (block: Json | undefined) =>
  block?.type === "thinking" || block?.type === "redacted_thinking";
const TOOL_ID = /^[a-zA-Z0-9_-]+$/;
const FUNCTION_NAME = /^[a-zA-Z0-9_-]{1,64}$/;

/** The rules an Anthropic Messages API request body breaks. */
export function anthropicViolations(body: Json): string[] {
  const out: string[] = [];
  const messages = (body.messages ?? []) as { role: string; content: unknown }[];
  const thinking = body.thinking as { type?: string; budget_tokens?: number } | undefined;
  const thinkingOn = thinking !== undefined && thinking.type !== "disabled";
  if (messages.length === 0) out.push("messages: at least one message is required");
  if (thinking?.type === "enabled") {
    const budget = thinking.budget_tokens ?? 0;
    if (budget < 1024) out.push("thinking.budget_tokens must be ≥ 1024");
    if (budget >= Number(body.max_tokens)) out.push("max_tokens must be greater than thinking.budget_tokens");
  }
  let breakpoints = 0;
  const countCache = (block: Json, where: string) => {
    if (block.cache_control == null) return;
    if (isThinkingBlock(block)) out.push(`${where}: cache_control cannot be set for thinking blocks`);
    breakpoints++;
  };
  for (const [i, block] of blocksOf(body.system).entries()) countCache(block, `system.${i}`);
  for (const [i, tool] of blocksOf(body.tools).entries()) countCache(tool, `tools.${i}`);
  /**
   * A text block is never empty; of whitespace only, it is refused unless its message holds
   * other text (`spoken`): what the API answers, as measured against it (fake-anthropic.ts).
   */
  const textRule = (text: unknown, where: string, spoken = false) => {
    if (typeof text !== "string" || text === "") out.push(`${where}: text content blocks must be non-empty`);
    else if (text.trim() === "" && !spoken)
      out.push(`${where}: text content blocks must contain non-whitespace text`);
  };
  if (typeof body.system === "string") textRule(body.system, "system");
  for (const [i, block] of blocksOf(body.system).entries()) textRule(block.text, `system.${i}`);
  const toolUseIds = new Set<string>();
  for (const [m, message] of messages.entries()) {
    const where = `messages.${m}`;
    if (typeof message.content === "string") {
      textRule(message.content, where);
      continue;
    }
    const blocks = blocksOf(message.content);
    if (blocks.length === 0) out.push(`${where}: content must not be empty`);
    if (message.role === "assistant" && blocks.some(isThinkingBlock) && !isThinkingBlock(blocks[0]))
      out.push(`${where}.content.0: an assistant message holding thinking blocks must start with one`);
    const spoken = blocks.some(
      (b) => b.type === "text" && typeof b.text === "string" && b.text.trim() !== "",
    );
    let pastResults = false;
    for (const [b, block] of blocks.entries()) {
      const at = `${where}.content.${b}`;
      countCache(block, at);
      if (block.type === "text") textRule(block.text, at, spoken);
      if (block.type === "thinking" && (typeof block.signature !== "string" || block.signature === ""))
        out.push(`${at}: thinking block without its signature`);
      if ((block.type === "tool_use" || isThinkingBlock(block)) && message.role !== "assistant")
        out.push(`${at}: ${String(block.type)} blocks can only be in assistant messages`);
      if (block.type === "tool_use") {
        const id = String(block.id);
        if (!TOOL_ID.test(id)) out.push(`${at}.id: must match ^[a-zA-Z0-9_-]+$`);
        if (!FUNCTION_NAME.test(String(block.name)))
          out.push(`${at}.tool_use.name: String should match pattern '^[a-zA-Z0-9_-]{1,64}$'`);
        if (toolUseIds.has(id)) out.push(`${at}: tool_use ids must be unique`);
        toolUseIds.add(id);
      }
      if (block.type === "tool_result") {
        if (message.role !== "user") out.push(`${at}: tool_result blocks can only be in user messages`);
        if (pastResults) out.push(`${at}: tool_result blocks must come first in the content array`);
        if (typeof block.content === "string") textRule(block.content, `${at}.content`);
      } else pastResults = true;
    }
    // Pairing with the message before (results) and after (calls).
    const calls = blocks.filter((b) => b.type === "tool_use").map((b) => String(b.id));
    if (calls.length > 0) {
      const next = messages[m + 1];
      const answered = new Set(
        blocksOf(next?.content)
          .filter((b) => b.type === "tool_result")
          .map((b) => String(b.tool_use_id)),
      );
      const missing = calls.filter((id) => !answered.has(id));
      if (missing.length > 0)
        out.push(
          `${where}: tool_use ids were found without tool_result blocks immediately after: ${missing.join(", ")}`,
        );
    }
    const previous = new Set(
      blocksOf(messages[m - 1]?.content)
        .filter((b) => b.type === "tool_use")
        .map((b) => String(b.id)),
    );
    for (const [b, block] of blocks.entries())
      if (block.type === "tool_result" && !previous.has(String(block.tool_use_id)))
        out.push(
          `${where}.content.${b}: unexpected tool_use_id found in tool_result blocks: ${String(block.tool_use_id)}`,
        );
  }
  if (breakpoints > 4)
    out.push(`A maximum of 4 blocks with cache_control may be provided. Found ${breakpoints}.`);
  const final = messages.at(-1);
  if (final?.role === "assistant") {
    const blocks = blocksOf(final.content);
    const tail = typeof final.content === "string" ? { type: "text", text: final.content } : blocks.at(-1);
    if (isThinkingBlock(tail)) out.push("final assistant message: the final block cannot be thinking");
    if (tail?.type === "text" && /\s$/.test(String(tail.text)))
      out.push("final assistant content cannot end with trailing whitespace");
    if (!thinkingOn && blocks.some(isThinkingBlock))
      out.push("final assistant message: cannot contain thinking when thinking is disabled");
    if (thinkingOn && !isThinkingBlock(blocks[0]))
      out.push("final assistant message: must start with a thinking block when thinking is enabled");
  }
  if (thinkingOn) {
    // The tool loop that ends the request: from the last user message holding no tool_result.
    const userTurn = messages.findLastIndex(
      (msg) => msg.role === "user" && !blocksOf(msg.content).some((b) => b.type === "tool_result"),
    );
    // Its opening step, or else the last assistant message asking for tools, starts with
    // thinking (a step after tool results need not think again: "tool use loops are part of
    // the assistant turn").
    const loop = messages.slice(userTurn + 1).filter((msg) => msg.role === "assistant");
    const last = loop.at(-1);
    if (
      last &&
      blocksOf(last.content).some((b) => b.type === "tool_use") &&
      !isThinkingBlock(blocksOf(loop[0]?.content)[0]) &&
      !isThinkingBlock(blocksOf(last.content)[0])
    )
      out.push("thinking on: the assistant turn of the last tool loop must start with a thinking block");
  }
  return out;
}

/** The rules an OpenAI chat completions request body breaks. */
export function chatViolations(body: Json): string[] {
  const out: string[] = [];
  const messages = (body.messages ?? []) as Json[];
  if (messages.length === 0) out.push("messages: at least one message is required");
  /** The calls of the assistant message the current run of tool messages follows. */
  let open: Set<string> | undefined;
  let answered = new Set<string>();
  const closeRun = (at: number) => {
    if (open === undefined) return;
    const missing = [...open].filter((id) => !answered.has(id));
    if (missing.length > 0)
      out.push(
        `messages.${at}: an assistant message with 'tool_calls' must be followed by tool messages responding to each 'tool_call_id': ${missing.join(", ")}`,
      );
    open = undefined;
  };
  for (const [i, message] of messages.entries()) {
    const where = `messages.${i}`;
    if (message.role === "tool") {
      const id = String(message.tool_call_id);
      if (open === undefined || !open.has(id))
        out.push(
          `${where}: messages with role 'tool' must be a response to a preceding message with 'tool_calls' (${id})`,
        );
      else if (answered.has(id)) out.push(`${where}: a second tool message for ${id}`);
      else answered.add(id);
      if (typeof message.content !== "string") out.push(`${where}.content: must be a string`);
      continue;
    }
    closeRun(i);
    if (message.role === "system" && i > 0) out.push(`${where}: a system message after the first`);
    if (message.role === "user" && typeof message.content !== "string")
      out.push(`${where}.content: must be a string`);
    if (message.role !== "assistant") continue;
    const calls = message.tool_calls as Json[] | undefined;
    if (calls !== undefined && calls.length === 0) out.push(`${where}.tool_calls: [] is too short`);
    if (!calls || calls.length === 0) {
      if (typeof message.content !== "string" || message.content === "")
        out.push(`${where}: an assistant message without tool_calls must have content`);
      continue;
    }
    open = new Set();
    answered = new Set();
    for (const [c, call] of calls.entries()) {
      const id = String(call.id);
      if (id.length > 40) out.push(`${where}.tool_calls.${c}.id: longer than 40 characters`);
      if (open.has(id)) out.push(`${where}.tool_calls.${c}.id: duplicate`);
      open.add(id);
      const name = String((call.function as Json | undefined)?.name);
      if (!FUNCTION_NAME.test(name)) out.push(`${where}.tool_calls.${c}.function.name: ${name}`);
    }
  }
  closeRun(messages.length);
  return out;
}

/** The rules an OpenAI Responses API request body (sent with `store: false`) breaks. */
export function responsesViolations(body: Json): string[] {
  const out: string[] = [];
  const input = (Array.isArray(body.input) ? body.input : []) as Json[];
  if (body.store !== false) out.push("store: the fleet sends store false");
  if (body.previous_response_id !== undefined)
    out.push("previous_response_id: nothing is stored with store false");
  const calls = new Map<string, number>();
  const outputs = new Map<string, number>();
  for (const [i, item] of input.entries()) {
    const where = `input.${i}`;
    if (item.type === "item_reference") out.push(`${where}: item_reference with store false`);
    if (item.type === "reasoning") {
      if (typeof item.encrypted_content !== "string" || item.encrypted_content === "")
        out.push(
          `${where}: Item with id '${String(item.id)}' not found. Items are not persisted when store is set to false`,
        );
      const next = input[i + 1];
      if (next?.type !== "function_call" && next?.type !== "message")
        out.push(`${where}: reasoning item provided without its required following item`);
      if (!(body.include as unknown[] | undefined)?.includes("reasoning.encrypted_content"))
        out.push(`${where}: reasoning sent without include reasoning.encrypted_content`);
    }
    if (item.type === "function_call") {
      const id = String(item.call_id);
      if (id.length > 64) out.push(`${where}.call_id: longer than 64 characters`);
      if (calls.has(id)) out.push(`${where}.call_id: duplicate ${id}`);
      calls.set(id, i);
      if (!FUNCTION_NAME.test(String(item.name))) out.push(`${where}.name: ${String(item.name)}`);
    }
    if (item.type === "function_call_output") {
      const id = String(item.call_id);
      if (!calls.has(id))
        out.push(`${where}: No tool call found for function call output with call_id ${id}`);
      if (outputs.has(id)) out.push(`${where}: a second output for ${id}`);
      outputs.set(id, i);
      if (typeof item.output !== "string") out.push(`${where}.output: must be a string`);
    }
    if (item.type === undefined || item.type === "message") {
      if (!["user", "assistant", "system", "developer"].includes(String(item.role)))
        out.push(`${where}.role: ${String(item.role)}`);
    }
  }
  for (const [id, at] of calls)
    if (!outputs.has(id)) out.push(`input.${at}: No tool output found for function call ${id}`);
  return out;
}
