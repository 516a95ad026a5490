/**
 * Chat completion chunks → events (resume-semantics.md §6), read by openai.ts one chunk at a
 * time; whether the stream finished (its `finish_reason` and `[DONE]`) is judged there.
 * - text deltas are yielded as they arrive (a `refusal` delta is text too; a `content` that is
 *   a list of parts, as Mistral's reasoning models send it, gives its text parts);
 * - tool call fragments are assembled by index and yielded, whole, once the response has
 *   finished (each fragment's characters as a `progress` event meanwhile, as is the reasoning
 *   a compatible server streams as `reasoning_content` or `reasoning`, which is not kept); arguments that are not a JSON object are kept as `{ "_raw": "<string>" }`
 *   so nothing the model wrote is lost (empty arguments are `{}`; openai-tool-calls.ts);
 * - `finish_reason` is normalised by `fromOpenAIFinishReason`; tool calls with `stop` (some
 *   servers do that) are `tool_use`; a refusal delta with `stop` is `refusal`;
 * - usage comes from the usage chunk (`stream_options.include_usage`); without one (or with
 *   one lacking a count) it is `null`, unknown — never 0 tokens. It reports
 *   `prompt_tokens_details.cached_tokens` as `cacheReadTokens` and
 *   `completion_tokens_details.reasoning_tokens` as `reasoningTokens` when the server sends them.
 */
import type { ChatCompletionChunk } from "openai/resources/chat/completions";
import type { Usage } from "../../shared/messages.js";
import { fromOpenAIFinishReason } from "../../shared/stop-reasons.js";
import { reportedTokens } from "../../shared/usage.js";
import { ToolCallAssembler } from "./openai-tool-calls.js";
import type { ModelEvent } from "./provider.js";

const tokens = reportedTokens;

/** A string's length; 0 for anything else. */
function lengthOf(value: unknown): number {
  return typeof value === "string" ? value.length : 0;
}

/**
 * A delta's `content`: a string, or a list of parts as Mistral's reasoning models stream it
 * (`[{"type":"thinking","thinking":[{"type":"text","text":…}]}]`, then `[{"type":"text",
 * "text":…}]`). `text`: the text parts joined (the answer); `otherChars`: the characters of the
 * other parts (thinking, not kept, like `reasoning_content`), for the output bound.
 */
function contentParts(content: unknown): { text: string; otherChars: number } {
  if (typeof content === "string") return { text: content, otherChars: 0 };
  if (!Array.isArray(content)) return { text: "", otherChars: 0 };
  let text = "";
  let otherChars = 0;
  for (const part of content as { type?: unknown; text?: unknown; thinking?: unknown }[]) {
    if (part?.type === "text" && typeof part.text === "string") text += part.text;
    else if (typeof part?.thinking === "string") otherChars += part.thinking.length;
    else if (Array.isArray(part?.thinking))
      for (const inner of part.thinking as { text?: unknown }[]) otherChars += lengthOf(inner?.text);
  }
  return { text, otherChars };
}

/** Usage from a usage chunk: both counts (and the cached / reasoning ones reported), or unknown. */
function usageOf(usage: ChatCompletionChunk["usage"]): Usage | null {
  const input = tokens(usage?.prompt_tokens);
  const output = tokens(usage?.completion_tokens);
  if (input === undefined || output === undefined) return null;
  const cached = tokens(usage?.prompt_tokens_details?.cached_tokens);
  const reasoning = tokens(usage?.completion_tokens_details?.reasoning_tokens);
  return {
    inputTokens: input,
    outputTokens: output,
    ...(cached === undefined ? {} : { cacheReadTokens: cached }),
    ...(reasoning === undefined ? {} : { reasoningTokens: reasoning }),
  };
}

/** One response's chunks read in order: the events of each, then those of its end. */
export class ChatStreamReader {
  /** Whether text (or a refusal) was yielded. */
  textStarted = false;
  /** The last `finish_reason` sent; null while none was. */
  finishReason: string | null = null;
  private refused = false;
  private usage: Usage | null = null;
  private readonly calls = new ToolCallAssembler();

  /** Whether a tool call fragment came. */
  get callsStarted(): boolean {
    return this.calls.started;
  }

  /** A chunk's events, in the order they are yielded. */
  read(chunk: ChatCompletionChunk): ModelEvent[] {
    const events: ModelEvent[] = [];
    if (chunk.usage) {
      this.usage = usageOf(chunk.usage);
      // Billed even if the stream breaks before [DONE] (call-model.ts counts it then).
      if (this.usage) events.push({ type: "usage", usage: this.usage });
    }
    const choice = chunk.choices?.[0];
    if (!choice) return events;
    const delta = choice.delta ?? {};
    // A list of parts (Mistral's reasoning models): its text parts are text, the rest only
    // output arriving (`contentParts`).
    const content = contentParts(delta.content as unknown);
    if (content.text.length > 0) {
      this.textStarted = true;
      events.push({ type: "text", delta: content.text });
    }
    if (typeof delta.refusal === "string" && delta.refusal.length > 0) {
      this.textStarted = true;
      this.refused = true;
      events.push({ type: "text", delta: delta.refusal });
    }
    // Reasoning a compatible server streams before the answer (vLLM/DeepSeek
    // `reasoning_content`, Ollama `reasoning`) is not kept, but shows the stream is alive.
    const reasoning = delta as { reasoning_content?: unknown; reasoning?: unknown };
    let chars = lengthOf(reasoning.reasoning_content) + lengthOf(reasoning.reasoning) + content.otherChars;
    for (const fragment of delta.tool_calls ?? []) chars += this.calls.add(fragment);
    if (delta.function_call) chars += this.calls.addLegacy(delta.function_call);
    if (chars > 0) events.push({ type: "progress", chars });
    if (choice.finish_reason) this.finishReason = choice.finish_reason;
    return events;
  }

  /** The events of a response that finished with `finishReason`: its whole tool calls, then `done`. */
  finish(finishReason: string): ModelEvent[] {
    const complete = this.calls.complete();
    let stopReason = fromOpenAIFinishReason(finishReason);
    if (stopReason === "end_turn" && complete.length > 0) stopReason = "tool_use";
    else if (stopReason === "end_turn" && this.refused) stopReason = "refusal";
    return [
      ...complete.map((call): ModelEvent => ({ type: "tool_call", call })),
      { type: "done", stopReason, usage: this.usage },
    ];
  }
}
