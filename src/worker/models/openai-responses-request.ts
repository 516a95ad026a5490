/**
 * The OpenAI Responses API's request (MODEL `api: "responses"`, contracts §13): the body
 * openai.ts sends through the SDK's `client.responses.create({ stream: true, ... })`. The
 * stream it answers with: openai-responses.ts.
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
 */
import type {
  FunctionTool,
  ResponseCreateParamsStreaming,
  ResponseInputItem,
} from "openai/resources/responses/responses";
import type { AssistantMessage, Message, ToolCall } from "../../shared/messages.js";
import { requestsTools } from "../../shared/resume-point.js";
import { FAILED_TOOL_PREFIX, openaiToolDescription, openaiToolParameters } from "./openai-request.js";
import type { ModelRequest, ToolSpec } from "./provider.js";
import { objectArray, replayableState, type StateTarget } from "./provider-state.js";
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
