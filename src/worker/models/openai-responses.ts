/**
 * The OpenAI Responses API (MODEL `api: "responses"`, contracts §13), used by openai.ts through
 * the SDK's `client.responses.create({ stream: true, ... })`: same client, same key and
 * transport rules (transport.ts), same error handling as chat completions.
 *
 * The request: openai-responses-request.ts.
 *
 * Stream → events: `response.output_text.delta` and `response.refusal.delta` are text;
 * `response.output_item.done` brings whole function calls (yielded once the response has
 * finished; one per `output_index`, in that order) and the items of the state. The step is
 * whole only with `response.completed` and no function call added but not done (stop
 * `end_turn`, `tool_use` with calls, `refusal` after a refusal) or
 * `response.incomplete` (`max_output_tokens` → `max_output`, `content_filter` → `refusal`,
 * another reason verbatim). A stream that ends or breaks before either is cut: after output it
 * ends without `done` (the runtime records `interrupted`), before any it fails retryably.
 * `response.failed` and `error` events fail the request, judged like HTTP errors
 * (`streamErrorRetryable`); a context-length failure before output is `context_full`.
 * Usage: `input_tokens` (cached included), `output_tokens` (reasoning included),
 * `input_tokens_details.cached_tokens` → `cacheReadTokens`, `cache_write_tokens` →
 * `cacheWriteTokens` where reported, `output_tokens_details.reasoning_tokens` →
 * `reasoningTokens`. A whole step with reasoning items keeps its output items as
 * `providerState`; reasoning items are reported as `kept` progress as they arrive (and what
 * the final `output` holds beyond what streamed, before the step is whole), so the output
 * bound holds for them as for text (model-attempt.ts).
 */
import type { ResponseStreamEvent, ResponseUsage } from "openai/resources/responses/responses";
import type { ProviderState, ToolCall, Usage } from "../../shared/messages.js";
import { reportedTokens } from "../../shared/usage.js";
import { argumentsText, parseToolArguments } from "./openai-tool-calls.js";
import type { ModelEvent } from "./provider.js";
import { jsonChars, makeState, objectArray, type StateTarget } from "./provider-state.js";

const count = reportedTokens;

/** Where items without an `output_index` go: after any index a response would number. */
const UNNUMBERED = 2 ** 40;

/** Usage of a finished response, or unknown. */
export function responsesUsage(usage: Partial<ResponseUsage> | null | undefined): Usage | null {
  const input = count(usage?.input_tokens);
  const output = count(usage?.output_tokens);
  if (input === undefined || output === undefined) return null;
  const cached = count(usage?.input_tokens_details?.cached_tokens);
  const written = count(
    (usage?.input_tokens_details as { cache_write_tokens?: unknown })?.cache_write_tokens,
  );
  const reasoning = count(usage?.output_tokens_details?.reasoning_tokens);
  return {
    inputTokens: input,
    outputTokens: output,
    ...(cached === undefined ? {} : { cacheReadTokens: cached }),
    ...(written === undefined ? {} : { cacheWriteTokens: written }),
    ...(reasoning === undefined ? {} : { reasoningTokens: reasoning }),
  };
}

/** Characters of a state's output items that are not calls (jsonChars: any nesting). */
function stateSize(output: readonly Record<string, unknown>[]): number {
  return output.reduce((sum, item) => (item.type === "function_call" ? sum : sum + jsonChars(item)), 0);
}

/** An item's `call_id`, else its `id` (a string), else undefined. */
function itemKey(item: unknown): string | undefined {
  const { call_id, id } = (item ?? {}) as { call_id?: unknown; id?: unknown };
  return typeof call_id === "string" && call_id ? call_id : typeof id === "string" && id ? id : undefined;
}

/** `incomplete_details.reason` → normalised stop reason (unknown values verbatim). */
export function fromIncompleteReason(reason: string | undefined | null): string {
  if (reason === "max_output_tokens") return "max_output";
  if (reason === "content_filter") return "refusal";
  return reason || "incomplete";
}

/**
 * An error the stream reported (`response.failed`, `error`): what openai.ts turns into a
 * ProviderError. `usage`: what a failed response carried, billed all the same (openai.ts
 * reports it before the error, so that call-model.ts counts it).
 */
export class ResponsesStreamError extends Error {
  constructor(
    message: string,
    readonly code: string | null,
    readonly type: string | null,
    readonly usage: Usage | null = null,
  ) {
    super(message);
  }
}

/**
 * The stream's events → model events (see the file comment). Throws ResponsesStreamError for
 * an error the server reported, rethrows a transport error; `output()` says whether anything
 * reached the caller.
 */
export class ResponsesStreamReader {
  output = false;
  private refused = false;
  /** Characters reported so far of what the state holds: text deltas and reasoning items. */
  private stateChars = 0;
  /**
   * The calls by `output_index`: an item sent again at its index (a replayed event) is one call,
   * not a second run of its tool, and items finished out of order still give the calls in the
   * order of the response's `output` — the order the state's `function_call` items pair with
   * the step's calls when the history goes back (openai-responses-request.ts).
   */
  private readonly calls = new Map<number, ToolCall>();
  private readonly items = new Map<number, Record<string, unknown>>();
  /**
   * Function calls added (`output_item.added`) and not done yet: `output_index` → the item's
   * `call_id` or `id`, which a done item matches too (one a server sent without its index).
   */
  private readonly openCalls = new Map<number, unknown>();
  /** Items that came without an `output_index` (indexOf). */
  private unnumbered = 0;

  constructor(private readonly target: StateTarget) {}

  /** The events one stream event yields; `end` once the response has finished. */
  read(event: ResponseStreamEvent): { events: ModelEvent[]; end: boolean } {
    switch (event.type) {
      case "response.output_text.delta":
        // Text is a string or nothing (a number, object or list a server sends is not text).
        if (typeof event.delta !== "string" || !event.delta) return { events: [], end: false };
        this.output = true;
        this.stateChars += event.delta.length;
        return { events: [{ type: "text", delta: event.delta }], end: false };
      case "response.refusal.delta":
        if (typeof event.delta !== "string" || !event.delta) return { events: [], end: false };
        this.output = true;
        this.refused = true;
        this.stateChars += event.delta.length;
        return { events: [{ type: "text", delta: event.delta }], end: false };
      case "response.function_call_arguments.delta":
        // The call is yielded whole at the end; its arguments meanwhile keep the stream alive
        // and count toward the output bound (call-model.ts).
        return {
          events:
            typeof event.delta === "string" && event.delta
              ? [{ type: "progress", chars: event.delta.length }]
              : [],
          end: false,
        };
      case "response.output_item.added":
        // Only a numbered one: a server that numbers none is told by nothing which done is its.
        if (
          (event.item as { type?: unknown } | null)?.type === "function_call" &&
          typeof event.output_index === "number"
        )
          this.openCalls.set(event.output_index, itemKey(event.item));
        return { events: [], end: false };
      case "response.output_item.done": {
        const item = event.item as unknown as Record<string, unknown>;
        const index = this.indexOf(event.output_index);
        this.items.set(index, item);
        this.calls.delete(index);
        this.openCalls.delete(index);
        for (const [open, key] of this.openCalls)
          if (key !== undefined && key === itemKey(item)) this.openCalls.delete(open);
        if (item.type === "function_call" && typeof item.name === "string" && item.name !== "") {
          this.calls.set(index, {
            id: typeof item.call_id === "string" && item.call_id ? item.call_id : String(item.id ?? ""),
            name: item.name,
            arguments: parseToolArguments(argumentsText(item.arguments) ?? ""),
          });
        }
        // A reasoning item is held and stored as the step's state: bounded like its text.
        if (item.type !== "reasoning") return { events: [], end: false };
        const chars = jsonChars(item);
        this.stateChars += chars;
        return { events: [{ type: "progress", chars, kept: true }], end: false };
      }
      case "response.completed":
      case "response.incomplete": {
        // A call added but never done: its call is not known, so the step is not whole (stored
        // whole, it read as answered, its call lost). Cut there (openai.ts: interrupted, or retried).
        if (event.type === "response.completed" && this.openCalls.size > 0)
          throw new Error("a function_call item was still open when the response completed");
        const response = event.response;
        let stopReason: string;
        const calls = [...this.calls.entries()].sort((a, b) => a[0] - b[0]).map(([, call]) => call);
        if (event.type === "response.incomplete")
          stopReason = fromIncompleteReason(response.incomplete_details?.reason);
        else stopReason = calls.length > 0 ? "tool_use" : this.refused ? "refusal" : "end_turn";
        const output = objectArray(response.output) ?? [...this.sorted()];
        const state = output.some((item) => item.type === "reasoning")
          ? makeState(this.target, { output })
          : undefined;
        const events: ModelEvent[] = calls.map((call) => ({ type: "tool_call", call }));
        if (calls.length > 0) this.output = true;
        // The state is the response's own `output`, which may hold more than the stream sent
        // (its calls are counted as calls): the rest is reported before the step is whole.
        const unreported = state ? stateSize(output) - this.stateChars : 0;
        if (unreported > 0) events.push({ type: "progress", chars: unreported, kept: true });
        events.push({
          type: "done",
          stopReason,
          usage: responsesUsage(response.usage),
          ...(state ? { providerState: state as ProviderState } : {}),
        });
        return { events, end: true };
      }
      case "response.failed": {
        const error = event.response.error;
        throw new ResponsesStreamError(
          `response failed: ${error?.code ?? "error"}: ${error?.message ?? "no message"}`,
          error?.code ?? null,
          null,
          responsesUsage(event.response.usage),
        );
      }
      case "error":
        throw new ResponsesStreamError(
          `stream error: ${event.code ?? "error"}: ${event.message}`,
          event.code,
          null,
        );
      default:
        return { events: [], end: false };
    }
  }

  /**
   * An item's place: its `output_index`, or, from a server that sends none (or not a number),
   * one after every numbered item, in arrival order, so that no item replaces another.
   */
  private indexOf(outputIndex: unknown): number {
    return typeof outputIndex === "number" && Number.isFinite(outputIndex)
      ? outputIndex
      : UNNUMBERED + this.unnumbered++;
  }

  private sorted(): Record<string, unknown>[] {
    return [...this.items.entries()].sort((a, b) => a[0] - b[0]).map(([, item]) => item);
  }
}
