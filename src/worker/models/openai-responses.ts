/**
 * The OpenAI Responses API (MODEL `api: "responses"`, contracts §13), used by openai.ts through
 * the SDK's `client.responses.create({ stream: true, ... })`: same client, same key and
 * transport rules (transport.ts), same error handling as chat completions.
 *
 * Request: `instructions` is the system prompt; `store: false` (nothing is kept at OpenAI:
 * the fleet's history is the only record) with `include: ["reasoning.encrypted_content"]`, so
 * reasoning comes back encrypted and can be sent back — except to a model that does not
 * reason, which refuses that `include` (openai.ts asks again without it). The history is `input` items:
 * - `user` and `internal` messages are `user` messages, verbatim;
 * - an `assistant` step whose `providerState` is for this provider, api and target
 *   (provider-state.ts) is replayed from it: its output items verbatim and in order
 *   (reasoning items with `encrypted_content`, message items), each `function_call` item with
 *   the step's stored call (same order) — and only for a step whose calls were executed
 *   (`requestsTools`); a reasoning item that is then not followed by a message or call item
 *   (a response cut by `max_output_tokens` while reasoning) is left out, as OpenAI refuses
 *   it; any other step is its text as an `assistant` message plus, when its
 *   calls were executed, one `function_call` item per call;
 * - a `tool` result is a `function_call_output` (a failed one prefixed "Error: "); a result
 *   whose call was not replayed (the API rejects those) is sent as user text instead;
 * - a call id an earlier step already sent (another provider's `call_0` of every turn), or
 *   one over 64 characters (an import's), goes out rewritten, for the call and its result
 *   alike (wire-ids.ts): the API refuses a repeat and a longer `call_id`.
 * `maxTokens` is `max_output_tokens`, `reasoningEffort` is `reasoning.effort`.
 *
 * Stream → events: `response.output_text.delta` and `response.refusal.delta` are text;
 * `response.output_item.done` brings whole function calls (yielded once the response has
 * finished) and the items of the state. The step is whole only with `response.completed`
 * (stop `end_turn`, `tool_use` with calls, `refusal` after a refusal) or
 * `response.incomplete` (`max_output_tokens` → `max_output`, `content_filter` → `refusal`,
 * another reason verbatim). A stream that ends or breaks before either is cut: after output it
 * ends without `done` (the runtime records `interrupted`), before any it fails retryably.
 * `response.failed` and `error` events fail the request, judged like HTTP errors
 * (`streamErrorRetryable`); a context-length failure before output is `context_full`.
 * Usage: `input_tokens` (cached included), `output_tokens` (reasoning included),
 * `input_tokens_details.cached_tokens` → `cacheReadTokens`, `cache_write_tokens` →
 * `cacheWriteTokens` where reported, `output_tokens_details.reasoning_tokens` →
 * `reasoningTokens`. A whole step with reasoning items keeps its output items as
 * `providerState`.
 */
import type {
  FunctionTool,
  ResponseCreateParamsStreaming,
  ResponseInputItem,
  ResponseStreamEvent,
  ResponseUsage,
} from "openai/resources/responses/responses";
import type { AssistantMessage, Message, ProviderState, ToolCall, Usage } from "../../shared/messages.js";
import { requestsTools } from "../../shared/resume-point.js";
import { reportedTokens } from "../../shared/usage.js";
import { FAILED_TOOL_PREFIX, openaiToolDescription, openaiToolParameters } from "./openai-request.js";
import { parseToolArguments } from "./openai-tool-calls.js";
import type { ModelEvent, ModelRequest, ToolSpec } from "./provider.js";
import { makeState, objectArray, replayableState, type StateTarget } from "./provider-state.js";
import { openaiToolName, responsesWireIds } from "./wire-ids.js";

export type ResponsesSettings = {
  model: string;
  maxTokens?: number;
  temperature?: number;
  reasoningEffort?: string;
};

function functionCall(
  call: ToolCall,
  ids: ReadonlyMap<string, string>,
  item?: Record<string, unknown>,
): ResponseInputItem {
  return {
    ...(item ?? {}),
    type: "function_call",
    call_id: ids.get(call.id) ?? call.id,
    name: openaiToolName(call.name),
    arguments: JSON.stringify(call.arguments),
  } as ResponseInputItem;
}

/** A step's items from its state (see the file comment), or undefined. */
function fromState(
  message: AssistantMessage,
  calls: readonly ToolCall[],
  ids: ReadonlyMap<string, string>,
  target: StateTarget,
): ResponseInputItem[] | undefined {
  const items = objectArray(replayableState(message, target)?.output);
  if (!items || items.length === 0) return undefined;
  const out: ResponseInputItem[] = [];
  let next = 0;
  for (const item of items) {
    if (item.type === "function_call") {
      const call = calls[next++];
      if (call) out.push(functionCall(call, ids, item));
    } else if (item.type === "reasoning" || item.type === "message") {
      out.push(item as unknown as ResponseInputItem);
    }
  }
  for (const call of calls.slice(next)) out.push(functionCall(call, ids));
  return withoutLoneReasoning(out);
}

/**
 * The items without a reasoning item that nothing it led to follows: OpenAI refuses one ("Item
 * 'rs_…' of type 'reasoning' was provided without its required following item") — a response
 * cut by `max_output_tokens` while it reasoned has nothing after its reasoning item, and the
 * calls of a step that did not stop normally are not replayed. Such reasoning produced nothing
 * the history keeps, so leaving it out loses nothing the model said.
 */
function withoutLoneReasoning(items: ResponseInputItem[]): ResponseInputItem[] {
  return items.filter((item, i) => {
    if (item.type !== "reasoning") return true;
    const next = items[i + 1]?.type;
    return next === "message" || next === "function_call";
  });
}

/** History → Responses API input items (rules in the file comment). */
export function toResponsesInput(history: readonly Message[], target?: StateTarget): ResponseInputItem[] {
  const out: ResponseInputItem[] = [];
  /** The latest step's calls a result may answer: stored id → wire id. */
  let open = new Map<string, string>();
  /** Call ids sent so far: the API refuses a repeat (responsesWireIds). */
  const used = new Set<string>();
  for (const message of history) {
    switch (message.role) {
      case "user":
      case "internal":
        out.push({ role: "user", content: message.content });
        break;
      case "assistant": {
        const calls = requestsTools(message) ? (message.toolCalls ?? []) : [];
        const ids = responsesWireIds(calls, used);
        const items = target ? fromState(message, calls, ids, target) : undefined;
        if (items) out.push(...items);
        else {
          if (message.content !== "") out.push({ role: "assistant", content: message.content });
          for (const call of calls) out.push(functionCall(call, ids));
        }
        open = ids;
        break;
      }
      case "tool": {
        const output = message.success ? message.content : `${FAILED_TOOL_PREFIX}${message.content}`;
        const callId = open.get(message.toolCallId);
        if (callId !== undefined) {
          out.push({ type: "function_call_output", call_id: callId, output });
          open.delete(message.toolCallId);
        } else {
          out.push({
            role: "user",
            content: `Result of tool ${message.name} (call ${message.toolCallId}): ${output}`,
          });
        }
        break;
      }
    }
  }
  return out;
}

export function toResponsesTools(tools: readonly ToolSpec[]): FunctionTool[] {
  return tools.map((tool) => ({
    type: "function",
    name: tool.name,
    description: openaiToolDescription(tool.description),
    parameters: openaiToolParameters(tool.parameters),
    strict: false,
  }));
}

/**
 * The request body. `encryptedReasoning: false` leaves out `include`, and replays no step's
 * provider state (the plain history: text and calls), for a model that does not reason
 * (openai-errors.ts: `refusesEncryptedReasoning`): it refuses reasoning items in its input
 * ("Reasoning input items can only be provided to a reasoning or computer use model"), and a state's
 * reasoning is only ever the items another model of the endpoint produced.
 */
export function buildResponsesBody(
  settings: ResponsesSettings,
  request: ModelRequest,
  target: StateTarget,
  encryptedReasoning = true,
): ResponseCreateParamsStreaming {
  return {
    model: settings.model,
    input: toResponsesInput(request.history, encryptedReasoning ? target : undefined),
    ...(request.system ? { instructions: request.system } : {}),
    stream: true,
    store: false,
    ...(encryptedReasoning ? { include: ["reasoning.encrypted_content" as const] } : {}),
    ...(request.tools.length > 0 ? { tools: toResponsesTools(request.tools) } : {}),
    ...(settings.maxTokens === undefined ? {} : { max_output_tokens: settings.maxTokens }),
    ...(settings.temperature === undefined ? {} : { temperature: settings.temperature }),
    ...(settings.reasoningEffort === undefined
      ? {}
      : { reasoning: { effort: settings.reasoningEffort as "low" } }),
  };
}

const count = reportedTokens;

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
  private readonly calls: ToolCall[] = [];
  private readonly items = new Map<number, Record<string, unknown>>();

  constructor(private readonly target: StateTarget) {}

  /** The events one stream event yields; `end` once the response has finished. */
  read(event: ResponseStreamEvent): { events: ModelEvent[]; end: boolean } {
    switch (event.type) {
      case "response.output_text.delta":
        if (!event.delta) return { events: [], end: false };
        this.output = true;
        return { events: [{ type: "text", delta: event.delta }], end: false };
      case "response.refusal.delta":
        if (!event.delta) return { events: [], end: false };
        this.output = true;
        this.refused = true;
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
      case "response.output_item.done": {
        const item = event.item as unknown as Record<string, unknown>;
        this.items.set(event.output_index, item);
        if (item.type === "function_call" && typeof item.name === "string" && item.name !== "") {
          this.calls.push({
            id: typeof item.call_id === "string" && item.call_id ? item.call_id : String(item.id ?? ""),
            name: item.name,
            arguments: parseToolArguments(typeof item.arguments === "string" ? item.arguments : ""),
          });
        }
        return { events: [], end: false };
      }
      case "response.completed":
      case "response.incomplete": {
        const response = event.response;
        let stopReason: string;
        if (event.type === "response.incomplete")
          stopReason = fromIncompleteReason(response.incomplete_details?.reason);
        else stopReason = this.calls.length > 0 ? "tool_use" : this.refused ? "refusal" : "end_turn";
        const output = objectArray(response.output) ?? [...this.sorted()];
        const state = output.some((item) => item.type === "reasoning")
          ? makeState(this.target, { output })
          : undefined;
        const events: ModelEvent[] = this.calls.map((call) => ({ type: "tool_call", call }));
        if (this.calls.length > 0) this.output = true;
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

  private sorted(): Record<string, unknown>[] {
    return [...this.items.entries()].sort((a, b) => a[0] - b[0]).map(([, item]) => item);
  }
}
