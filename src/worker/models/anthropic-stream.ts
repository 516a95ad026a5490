/**
 * The Messages API's raw stream events → events (resume-semantics.md §6), for the Anthropic
 * provider (anthropic.ts).
 *
 * Text deltas are yielded as they arrive; a tool call whole once its block stops; `message_stop`
 * `done` with the normalised stop reason and the usage. Only `message_stop` makes a step whole
 * (§6), with no tool_use block open: a stream that ends or breaks before it (even after
 * `message_delta`) ends without `done` after output (`interrupted`, partial text kept), and
 * throws a retryable ProviderError before any (nothing reached the caller). Usage is what
 * `message_start`/`message_delta` reported (input counts cache reads and writes); when they
 * did not report both counts it is `null`, unknown. Cache reads and
 * writes (`cache_read_input_tokens`, `cache_creation_input_tokens`) are `cacheReadTokens` /
 * `cacheWriteTokens`, `output_tokens_details.thinking_tokens` is `reasoningTokens`.
 *
 * Thinking (contracts §13): `thinking` and `redacted_thinking` blocks are assembled from their
 * deltas (`thinking_delta`, `signature_delta`) and, with the step's text and tool_use blocks
 * in stream order, become the step's `providerState` (provider-state.ts) — only on a whole
 * step (`message_stop`), and only when the step has thinking. Their characters are `kept`
 * progress as they arrive, so the output bound holds for them as for text (model-attempt.ts).
 * A thinking block without a signature (no `signature_delta` came), or with a NUL or lone
 * surrogate that storing would replace, is left out: the API refuses it back.
 */
import { APIConnectionError, APIError } from "@anthropic-ai/sdk";
import type { RawMessageStreamEvent } from "@anthropic-ai/sdk/resources/messages";
import { isStorableText, type ProviderState, type Usage } from "../../shared/messages.js";
import { fromAnthropicStopReason, isNormalStop } from "../../shared/stop-reasons.js";
import { reportedTokens } from "../../shared/usage.js";
import { classifyAnthropicError } from "./anthropic-errors.js";
import { type AnthropicModelConfig, anthropicTarget } from "./anthropic-request.js";
import { toolCall } from "./anthropic-tool-input.js";
import { type ModelEvent, type ModelRequest, ProviderError, type ProviderFail } from "./provider.js";
import { makeState } from "./provider-state.js";

/** The events of the step `events` streams, asked by `request` of the model `config`. */
export async function* readAnthropicStream(
  events: AsyncIterable<RawMessageStreamEvent>,
  request: ModelRequest,
  config: AnthropicModelConfig,
  fail: ProviderFail,
): AsyncIterable<ModelEvent> {
  let output = false;
  let stopReason: string | null = null;
  // Each count as last reported; null while the stream has not reported it.
  let inputTokens: number | null = null;
  let outputTokens: number | null = null;
  let cacheRead: number | null = null;
  let cacheWrite: number | null = null;
  let thinkingTokens: number | null = null;
  /** Every block of the step by index, as the API sent it (for `providerState`). */
  const blocks = new Map<number, Record<string, unknown>>();
  const toolBlocks = new Map<number, { id: string; name: string; json: string; input: unknown }>();
  // Indexes whose block started / stopped / is sent again. An index is a block's place in the
  // message: a block sent again there (a proxy replaying events: its start, deltas and stop) is
  // ignored, or its tool call ran twice.
  const [started, stopped, replayed] = [new Set<number>(), new Set<number>(), new Set<number>()];
  type ReportedUsage = {
    input_tokens?: number | null;
    output_tokens?: number | null;
    cache_creation_input_tokens?: number | null;
    cache_read_input_tokens?: number | null;
    output_tokens_details?: { thinking_tokens?: number | null } | null;
  };
  // A count the provider sent that is no count (negative, infinite) makes the step's usage
  // unknown: keeping an earlier report instead would undercount it (usage.ts).
  let badCount = false;
  const count = (n: unknown): number | null => {
    if (n === undefined || n === null) return null;
    const tokens = reportedTokens(n);
    if (tokens === undefined) badCount = true;
    return tokens ?? null;
  };
  const report = (u: ReportedUsage | null | undefined) => {
    if (!u) return;
    // Total input = uncached + cache writes + cache reads.
    const input = count(u.input_tokens);
    cacheWrite = count(u.cache_creation_input_tokens) ?? cacheWrite;
    cacheRead = count(u.cache_read_input_tokens) ?? cacheRead;
    if (input !== null) inputTokens = input + (cacheWrite ?? 0) + (cacheRead ?? 0);
    outputTokens = count(u.output_tokens) ?? outputTokens;
    thinkingTokens = count(u.output_tokens_details?.thinking_tokens) ?? thinkingTokens;
  };

  /** The usage reported so far (for a step cut before `message_stop`), or null. */
  const reportedSoFar = () =>
    badCount ? null : usageOf(inputTokens, outputTokens, cacheRead, cacheWrite, thinkingTokens);

  /** The type of the event being read: an error while it is set is one of reading it, not of the stream. */
  let reading: string | undefined;
  try {
    for await (const event of events) {
      reading = typeof event?.type === "string" ? event.type : "unnamed";
      switch (event.type) {
        case "message_start": {
          report(event.message.usage);
          const sofar = reportedSoFar();
          if (sofar) yield { type: "usage", usage: sofar };
          break;
        }
        case "content_block_start": {
          // A stopped block sent again: ignored until its stop.
          if (stopped.has(event.index) && replayed.add(event.index)) break;
          started.add(event.index);
          const block = event.content_block;
          if (block.type === "text") {
            // Text is a string or nothing (a number, object or list a server sends is not text).
            const text = typeof block.text === "string" ? block.text : "";
            blocks.set(event.index, { type: "text", text });
            if (text) {
              output = true;
              yield { type: "text", delta: text };
            }
          } else if (block.type === "tool_use") {
            // Strings, whatever the server sent (the SDK checks nothing): an id that is not one
            // is given another (step-message.ts), a call without a name is dropped at its end.
            const id = typeof block.id === "string" ? block.id : "";
            const name = typeof block.name === "string" ? block.name : "";
            blocks.set(event.index, { type: "tool_use", id, name });
            toolBlocks.set(event.index, { id, name, json: "", input: block.input });
          } else if (block.type === "thinking") {
            blocks.set(event.index, {
              type: "thinking",
              thinking: block.thinking ?? "",
              signature: block.signature ?? "",
            });
            const chars = lengthOf(block.thinking) + lengthOf(block.signature);
            if (chars > 0) yield { type: "progress", chars, kept: true };
          } else if (block.type === "redacted_thinking") {
            blocks.set(event.index, { type: "redacted_thinking", data: block.data });
            if (lengthOf(block.data) > 0) yield { type: "progress", chars: lengthOf(block.data), kept: true };
          }
          break;
        }
        case "content_block_delta": {
          if (replayed.has(event.index)) break;
          const delta = event.delta;
          const block = blocks.get(event.index);
          if (delta.type === "text_delta" && typeof delta.text === "string" && delta.text) {
            if (block?.type === "text") block.text = `${block.text as string}${delta.text}`;
            output = true;
            yield { type: "text", delta: delta.text };
          } else if (delta.type === "thinking_delta") {
            if (block?.type === "thinking") block.thinking = `${block.thinking as string}${delta.thinking}`;
            if (typeof delta.thinking === "string" && delta.thinking)
              yield { type: "progress", chars: delta.thinking.length, kept: true };
          } else if (delta.type === "signature_delta") {
            if (block?.type === "thinking")
              block.signature = `${block.signature as string}${delta.signature}`;
            // Held and stored with the step like the thinking it signs: bounded the same way.
            if (lengthOf(delta.signature) > 0)
              yield { type: "progress", chars: lengthOf(delta.signature), kept: true };
          } else if (delta.type === "input_json_delta") {
            const block = toolBlocks.get(event.index);
            if (block) block.json += delta.partial_json;
            if (typeof delta.partial_json === "string" && delta.partial_json)
              yield { type: "progress", chars: delta.partial_json.length };
          }
          break;
        }
        case "content_block_stop": {
          replayed.delete(event.index);
          if (!started.has(event.index) || stopped.has(event.index)) break;
          stopped.add(event.index);
          const block = toolBlocks.get(event.index);
          if (block) {
            toolBlocks.delete(event.index);
            // A call without a name cannot be run, answered or sent back (a stored call is
            // named): dropped, from the step's state too, as chat completions drops one.
            if (block.name === "") {
              blocks.delete(event.index);
              break;
            }
            output = true;
            yield { type: "tool_call", call: toolCall(block) };
          }
          break;
        }
        case "message_delta": {
          if (event.delta.stop_reason) stopReason = event.delta.stop_reason;
          report(event.usage);
          const sofar = reportedSoFar();
          if (sofar) yield { type: "usage", usage: sofar };
          break;
        }
        case "message_stop":
          // Without a stop reason the step is not known to be whole: treat it as a break.
          if (!stopReason) {
            broken(output, request, fail, "the stream ended without a stop reason");
            return;
          }
          // A tool_use block that never stopped: a step whose calls would run is not whole
          // (stored so, its call was lost). One cut by max_tokens runs none: it stays max_output.
          if (toolBlocks.size > 0 && isNormalStop(fromAnthropicStopReason(stopReason))) {
            broken(output, request, fail, "a tool_use block was still open at message_stop");
            return;
          }
          yield {
            type: "done",
            stopReason: fromAnthropicStopReason(stopReason),
            usage: badCount
              ? null
              : usageOf(inputTokens, outputTokens, cacheRead, cacheWrite, thinkingTokens),
            ...stateOf(blocks, config),
          };
          return;
        default:
          // Unknown event types (the API may add some) are ignored.
          break;
      }
      reading = undefined;
    }
  } catch (error) {
    // An event without the fields its type has (`message_start` with no message): what the
    // server sent cannot be read — said so, not as the TypeError reading it threw.
    if (reading !== undefined && error instanceof TypeError) {
      broken(output, request, fail, `the stream sent a ${reading} event that cannot be read`);
      return;
    }
    const failure = classifyAnthropicError(error, fail);
    if (failure === "context_full") {
      if (!output) {
        yield { type: "done", stopReason: "context_full" };
        return;
      }
      throw fail("anthropic stream error: the context window is full", false);
    }
    // An `error` event is the provider's answer: throw it. A transport break after output
    // ends the stream without `done` (interrupted, partial kept); before output it throws.
    if (error instanceof APIError && !(error instanceof APIConnectionError) && error.status === undefined)
      throw failure;
    // The transport refusing the body (a line or an event past its bound: sse-lines.ts) is final
    // before output, as for the other providers: the same request would get the same body.
    if (!output && error instanceof ProviderError && !error.retryable && !request.signal.aborted) throw error;
    broken(output, request, fail, failure.message);
    return;
  }
  broken(output, request, fail, "the stream ended before message_stop");
}

/**
 * The step's blocks in stream order, as its provider state (provider-state.ts) — only when
 * it has thinking to send back. A thinking block that never got its `signature_delta` is
 * left out: the API refuses a thinking block without its signature, so it could never go
 * back, and a tool turn left without a thinking block is continued without thinking
 * (anthropic-request.ts). So is one holding what cannot be stored as it is (a NUL, a lone
 * surrogate: contracts §12): stored with U+FFFD in its place, it no longer matches its
 * signature, and every later request of the turn would be refused ("Invalid signature").
 */
function stateOf(
  blocks: Map<number, Record<string, unknown>>,
  config: AnthropicModelConfig,
): { providerState?: ProviderState } {
  const content = [...blocks.entries()]
    .sort((a, b) => a[0] - b[0])
    .map(([, block]) => block)
    .filter((block) => block.type !== "thinking" || (block.signature !== "" && storedAsItCame(block)))
    .filter((block) => block.type !== "redacted_thinking" || storedAsItCame(block));
  if (!content.some((block) => block.type === "thinking" || block.type === "redacted_thinking")) return {};
  return { providerState: makeState(anthropicTarget(config), { content }) };
}

/** A stream that broke: after output, end without `done`; before any, fail retryably. */
function broken(output: boolean, request: ModelRequest, fail: ProviderFail, why: string): void {
  if (output) return;
  if (request.signal.aborted) throw fail("the request was aborted", false);
  throw fail(`anthropic: ${why.replace(/^anthropic: /, "")} (before any output)`, true);
}

/** Whether every string of a thinking block is stored unchanged (no U+0000, no lone surrogate). */
function storedAsItCame(block: Record<string, unknown>): boolean {
  return Object.values(block).every((value) => typeof value !== "string" || isStorableText(value));
}

/** Both counts as reported (with the cache and thinking counts reported), or unknown. */
function usageOf(
  inputTokens: number | null,
  outputTokens: number | null,
  cacheRead: number | null = null,
  cacheWrite: number | null = null,
  thinkingTokens: number | null = null,
): Usage | null {
  if (inputTokens === null || outputTokens === null) return null;
  return {
    inputTokens,
    outputTokens,
    ...(cacheRead === null ? {} : { cacheReadTokens: cacheRead }),
    ...(cacheWrite === null ? {} : { cacheWriteTokens: cacheWrite }),
    ...(thinkingTokens === null ? {} : { reasoningTokens: thinkingTokens }),
  };
}

/** A string's length; 0 for anything else. */
function lengthOf(value: unknown): number {
  return typeof value === "string" ? value.length : 0;
}
