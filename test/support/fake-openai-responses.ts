/**
 * A local OpenAI Responses API for tests: a node:http server on 127.0.0.1 (port 0) answering
 * `POST /v1/responses` from a script with the real streaming wire protocol (`event: TYPE` +
 * `data: {json}` server-sent events: `response.created`, `response.output_item.added/done`,
 * `response.output_text.delta`, `response.function_call_arguments.delta`, then
 * `response.completed`, `response.incomplete` or `response.failed`), or an HTTP error with the
 * API's JSON body.
 *
 * Like the real service with `store: false`, it rejects (400 `invalid_request_error`):
 * - a `function_call` item whose call came with a reasoning item, sent back to a model that
 *   reasons without that reasoning item right before it (same id, same `encrypted_content`);
 * - a reasoning item whose `encrypted_content` is not one it sent;
 * - a reasoning item not followed by the output item it led to (a `message` or a
 *   `function_call`): "Item 'rs_…' of type 'reasoning' was provided without its required
 *   following item." — as when a response cut by `max_output_tokens` during its reasoning is
 *   sent back with nothing after its reasoning item;
 * - a `function_call_output` with no `function_call` of the same `call_id` before it;
 * - two `function_call` items of the same item id, which an item sent without one takes from
 *   its `call_id` ("Duplicate item found with id fc_call_…", as OpenAI answers);
 * - a `call_id` (of a `function_call` or a `function_call_output`) over 64 characters:
 *   "Invalid 'input[N].call_id': string too long. Expected a string with maximum length 64, but
 *   got a string with length L instead." (`string_above_max_length`);
 * - a `function_call` whose `name` does not match `^[a-zA-Z0-9_-]{1,64}$` (as chat completions
 *   answers for `messages[N].tool_calls[M].function.name`, `invalid_value`);
 * - a request with `stream` not true;
 * - a function tool whose `parameters` has a `type` other than `"object"`, absent included
 *   ("Invalid schema for function 'x': schema must be a JSON Schema of 'type: \"object\"', got
 *   'type: \"None\"'.", as chat completions answers);
 * - `max_output_tokens` below 16: "Invalid 'max_output_tokens': integer below minimum value.
 *   Expected a value >= 16, but got 8 instead." (`integer_below_min_value`, `param:
 *   "max_output_tokens"`; the API's documented minimum);
 * - a reasoning item in the input of a model that does not reason (a name starting `gpt-4`,
 *   like gpt-4o and gpt-4.1): "Reasoning input items can only be provided to a reasoning or
 *   computer use model. Remove reasoning items from your input and try again." — checked
 *   before the next rule (which of the two OpenAI answers first is not documented);
 * - `include: ["reasoning.encrypted_content"]` for a model that does not reason: "Encrypted
 *   content is not supported with this model." (`param: "include"`).
 * Reasoning items carry `encrypted_content` only when the request's `include` asks for it.
 */
import { createServer, type IncomingMessage, type ServerResponse } from "node:http";
import type { AddressInfo } from "node:net";
import { responsesViolations } from "./wire-validators.js";

export type FakeResponsesStep = {
  /** A reasoning item first (its encrypted content is generated). */
  reasoning?: boolean;
  /**
   * Raw JSON text of more fields of that reasoning item (`"a":[[…]]`), written into the events
   * as given: what a server may send that JSON.stringify could not write (100,000 levels deep).
   */
  reasoningFields?: string;
  text?: string[];
  functionCalls?: { callId: string; name: string; arguments: string }[];
  /** `completed` (default) or `incomplete` with this reason. */
  incomplete?: "max_output_tokens" | "content_filter";
  usage?: { input_tokens: number; output_tokens: number; cached_tokens?: number; reasoning_tokens?: number };
  /**
   * End with `response.failed` carrying this error (after the items above; a real failed
   * response's `output` keeps what was generated) instead of completed / incomplete.
   */
  failed?: { code: string; message: string };
  /** Destroy the connection after this many events. */
  cutAfterEvents?: number;
  /** Answer with this HTTP status and error instead. */
  status?: number;
  error?: { message: string; type: string; code?: string | null };
  /** Headers of that error answer. */
  headers?: Record<string, string>;
};

export type FakeResponsesRequest = {
  path: string;
  headers: IncomingMessage["headers"];
  // biome-ignore lint/suspicious/noExplicitAny: a JSON body, inspected by tests
  body: any;
};

export type FakeResponses = {
  /** Base URL ending in `/v1`. */
  url: string;
  requests: FakeResponsesRequest[];
  script(...steps: FakeResponsesStep[]): void;
  pending(): number;
  close(): Promise<void>;
};

type Item = Record<string, unknown>;

/** The least `max_output_tokens` the Responses API accepts. */
const MIN_OUTPUT_TOKENS = 16;
/** The longest `call_id` the Responses API accepts back. */
const MAX_CALL_ID = 64;
/** A function name the OpenAI APIs accept, in `tools` and in the calls of a history alike. */
const TOOL_NAME = /^[a-zA-Z0-9_-]{1,64}$/;

export async function startFakeResponses(initial: FakeResponsesStep[] = []): Promise<FakeResponses> {
  const script = [...initial];
  const requests: FakeResponsesRequest[] = [];
  /** id → encrypted content of each reasoning item sent. */
  const reasoningSent = new Map<string, string>();
  /** call_id → the id of the reasoning item that came with it. */
  const callReasoning = new Map<string, string>();
  let n = 0;

  function validate(body: Item): string | null {
    if (body.stream !== true) return "stream must be true for this fake";
    for (const tool of (Array.isArray(body.tools) ? body.tools : []) as Item[]) {
      const parameters = tool.parameters as Item | undefined;
      if (parameters && parameters.type !== "object")
        return `Invalid schema for function '${String(tool.name)}': schema must be a JSON Schema of 'type: "object"', got 'type: "${String(parameters.type ?? "None")}"'.`;
    }
    if (typeof body.max_output_tokens === "number" && body.max_output_tokens < MIN_OUTPUT_TOKENS)
      return `Invalid 'max_output_tokens': integer below minimum value. Expected a value >= ${MIN_OUTPUT_TOKENS}, but got ${body.max_output_tokens} instead.`;
    const reasons = !String(body.model).startsWith("gpt-4");
    if (!reasons && Array.isArray(body.input) && body.input.some((item: Item) => item?.type === "reasoning"))
      return "Reasoning input items can only be provided to a reasoning or computer use model. Remove reasoning items from your input and try again.";
    if (!reasons && Array.isArray(body.include) && body.include.includes("reasoning.encrypted_content"))
      return "Encrypted content is not supported with this model.";
    const input = (Array.isArray(body.input) ? body.input : []) as Item[];
    const calls = new Set<string>();
    const itemIds = new Set<string>();
    for (const [i, item] of input.entries()) {
      const callId = item.call_id;
      if (typeof callId === "string" && callId.length > MAX_CALL_ID)
        return `Invalid 'input[${i}].call_id': string too long. Expected a string with maximum length ${MAX_CALL_ID}, but got a string with length ${callId.length} instead.`;
      if (item.type === "function_call" && !TOOL_NAME.test(String(item.name)))
        return `Invalid 'input[${i}].name': string does not match pattern. Expected a string that matches the pattern '^[a-zA-Z0-9_-]+$'.`;
      if (item.type === "reasoning") {
        const sent = reasoningSent.get(String(item.id));
        if (sent === undefined || item.encrypted_content !== sent)
          return `The encrypted content for item ${String(item.id)} could not be verified.`;
        const next = input[i + 1];
        if (next?.type !== "message" && next?.type !== "function_call")
          return `Item '${String(item.id)}' of type 'reasoning' was provided without its required following item.`;
      }
      if (item.type === "function_call") {
        // An item without an id of its own is known by one derived from its call_id.
        const itemId = String(item.id ?? `fc_${String(item.call_id)}`);
        if (itemIds.has(itemId))
          return `Duplicate item found with id ${itemId}. Remove duplicate items from your input and try again.`;
        itemIds.add(itemId);
        calls.add(String(item.call_id));
        const reasoning = callReasoning.get(String(item.call_id));
        // A model that does not reason has no use for it (the plain history a fallback sends).
        if (reasoning !== undefined && reasons) {
          // The reasoning item must come before this call's group of items.
          let j = i - 1;
          while (j >= 0 && (input[j]!.type === "function_call" || input[j]!.type === "message")) j--;
          const before = input[j];
          if (before?.type !== "reasoning" || before.id !== reasoning)
            return `Item '${String(item.id ?? item.call_id)}' of type 'function_call' was provided without its required 'reasoning' item: '${reasoning}'.`;
        }
      }
      if (item.type === "function_call_output" && !calls.has(String(item.call_id)))
        return `No tool call found for function call output with call_id ${String(item.call_id)}.`;
    }
    return null;
  }

  function events(step: FakeResponsesStep, body: Item): { event: string; data: Item }[] {
    const id = `resp_${++n}`;
    const out: { event: string; data: Item }[] = [];
    const output: Item[] = [];
    let seq = 0;
    const push = (data: Item) =>
      out.push({ event: String(data.type), data: { ...data, sequence_number: seq++ } });
    const base = { id, object: "response", model: body.model, output: [], usage: null };
    push({ type: "response.created", response: { ...base, status: "in_progress" } });
    const include = Array.isArray(body.include) && body.include.includes("reasoning.encrypted_content");
    if (step.reasoning) {
      const rid = `rs_${n}`;
      const encrypted = `enc_${n}_${Math.random().toString(36).slice(2)}`;
      reasoningSent.set(rid, encrypted);
      const item: Item = {
        id: rid,
        type: "reasoning",
        summary: [],
        ...(include ? { encrypted_content: encrypted } : {}),
      };
      for (const call of step.functionCalls ?? []) callReasoning.set(call.callId, rid);
      push({ type: "response.output_item.added", output_index: output.length, item: { ...item } });
      push({ type: "response.output_item.done", output_index: output.length, item });
      output.push(item);
    }
    if (step.text) {
      const mid = `msg_${n}`;
      const index = output.length;
      push({
        type: "response.output_item.added",
        output_index: index,
        item: { id: mid, type: "message", role: "assistant", status: "in_progress", content: [] },
      });
      for (const delta of step.text)
        push({
          type: "response.output_text.delta",
          item_id: mid,
          output_index: index,
          content_index: 0,
          delta,
          logprobs: [],
        });
      const item: Item = {
        id: mid,
        type: "message",
        role: "assistant",
        status: "completed",
        content: [{ type: "output_text", text: step.text.join(""), annotations: [] }],
      };
      push({ type: "response.output_item.done", output_index: index, item });
      output.push(item);
    }
    for (const call of step.functionCalls ?? []) {
      const index = output.length;
      const item: Item = {
        id: `fc_${call.callId}`,
        type: "function_call",
        call_id: call.callId,
        name: call.name,
        arguments: call.arguments,
        status: "completed",
      };
      push({ type: "response.output_item.added", output_index: index, item: { ...item, arguments: "" } });
      push({
        type: "response.function_call_arguments.delta",
        item_id: item.id,
        output_index: index,
        delta: call.arguments,
      });
      push({ type: "response.output_item.done", output_index: index, item });
      output.push(item);
    }
    const u = step.usage ?? { input_tokens: 20, output_tokens: 8 };
    const usage = {
      input_tokens: u.input_tokens,
      input_tokens_details: { cached_tokens: u.cached_tokens ?? 0 },
      output_tokens: u.output_tokens,
      output_tokens_details: { reasoning_tokens: u.reasoning_tokens ?? 0 },
      total_tokens: u.input_tokens + u.output_tokens,
    };
    if (step.failed)
      push({
        type: "response.failed",
        response: { ...base, status: "failed", error: step.failed, incomplete_details: null, output, usage },
      });
    else if (step.incomplete)
      push({
        type: "response.incomplete",
        response: {
          ...base,
          status: "incomplete",
          incomplete_details: { reason: step.incomplete },
          output,
          usage,
        },
      });
    else push({ type: "response.completed", response: { ...base, status: "completed", output, usage } });
    return out;
  }

  async function answer(req: IncomingMessage, res: ServerResponse): Promise<void> {
    let raw = "";
    for await (const chunk of req) raw += chunk;
    const body = raw ? JSON.parse(raw) : {};
    requests.push({ path: req.url ?? "", headers: req.headers, body });
    const json = (status: number, error: Item, headers: Record<string, string> = {}) => {
      res.writeHead(status, { "content-type": "application/json", ...headers });
      res.end(JSON.stringify({ error }));
    };
    if (req.method !== "POST" || req.url !== "/v1/responses")
      return json(404, { message: "not found", type: "invalid_request_error", code: null });
    // What the fake was taught, then every documented rule (wire-validators.ts).
    const invalid = validate(body) ?? responsesViolations(body)[0] ?? null;
    if (invalid)
      return json(400, {
        message: invalid,
        type: "invalid_request_error",
        code: null,
        param: invalid.startsWith("Encrypted content")
          ? "include"
          : invalid.startsWith("Invalid 'max_output_tokens'")
            ? "max_output_tokens"
            : "input",
      });
    const step = script.shift();
    if (!step)
      return json(500, { message: "fake-responses: no scripted response left", type: "server_error" });
    if (step.status)
      return json(
        step.status,
        { code: null, ...(step.error ?? { message: "error", type: "server_error" }) },
        step.headers,
      );
    res.writeHead(200, { "content-type": "text/event-stream", "cache-control": "no-cache" });
    for (const [i, { event, data }] of events(step, body).entries()) {
      if (step.cutAfterEvents !== undefined && i >= step.cutAfterEvents) {
        await new Promise((r) => setTimeout(r, 20));
        res.destroy();
        return;
      }
      let json = JSON.stringify(data);
      if (step.reasoningFields)
        json = json.replace('"type":"reasoning"', `"type":"reasoning",${step.reasoningFields}`);
      res.write(`event: ${event}\ndata: ${json}\n\n`);
    }
    res.end();
  }

  const server = createServer((req, res) => {
    answer(req, res).catch(() => res.destroy());
  });
  await new Promise<void>((resolve) => server.listen(0, "127.0.0.1", resolve));
  const { port } = server.address() as AddressInfo;
  return {
    url: `http://127.0.0.1:${port}/v1`,
    requests,
    script: (...steps) => {
      script.push(...steps);
    },
    pending: () => script.length,
    close: async () => {
      server.closeAllConnections();
      await new Promise<void>((resolve) => server.close(() => resolve()));
    },
  };
}
