/**
 * A fake OpenAI-compatible server for tests: a real HTTP server on 127.0.0.1 (port 0) that
 * speaks the chat-completions SSE wire protocol (`data: {json}\n\n` chunks with
 * `choices[0].delta` and `finish_reason`, a usage chunk when `stream_options.include_usage`
 * asks for it, then `data: [DONE]`). Each request is answered by the next scripted
 * response; every request body is recorded for inspection. Like OpenAI, it refuses (400
 * `string_above_max_length`) a tool call id sent back that is longer than 40 characters, and
 * (400 `invalid_value`) a tool call sent back whose `function.name` does not match
 * `^[a-zA-Z0-9_-]{1,64}$`; and, as OpenAI does, more than 128 `tools` (400
 * `array_above_max_length`), a tool's `function.description` over 1,024 characters (400
 * `string_above_max_length`) and a tool's `function.parameters` whose `type` is not
 * `"object"`, absent included (400 `invalid_function_parameters`: "schema must be a JSON
 * Schema of 'type: \"object\"', got 'type: \"None\"'").
 */
import { createServer, type IncomingMessage, type ServerResponse } from "node:http";
import type { AddressInfo } from "node:net";
import { chatViolations } from "./wire-validators.js";

export type FakeToolCall = {
  id?: string;
  name: string;
  /** The arguments text exactly as streamed (need not be valid JSON). */
  arguments: string;
  /** How many chunks the arguments are split across. Default 3. */
  fragments?: number;
};

export type FakeResponse = {
  /** How many requests this response answers. Default 1. */
  times?: number;
  /** Time to wait before answering. */
  delayMs?: number;
  /** Answer only once this settles: a response held in flight until the test lets it go. */
  hold?: Promise<unknown>;
  /** A non-200 status answers with a JSON error body and no stream. */
  status?: number;
  headers?: Record<string, string>;
  /** The error body; default `{ error: { message, type, code } }` built from the fields below. */
  errorBody?: unknown;
  errorMessage?: string;
  errorCode?: string | null;
  errorType?: string;
  /** Streamed text, one chunk per piece. */
  text?: string[];
  toolCalls?: FakeToolCall[];
  /** Extra raw `delta` objects, one chunk each, after the text and tool calls. */
  deltas?: Record<string, unknown>[];
  /** Default `tool_calls` with tool calls, else `stop`; `null`: no finish chunk. */
  finishReason?: string | null;
  /**
   * Default `{ prompt_tokens: 11, completion_tokens: 7 }`; `null`: no usage chunk. The details
   * (`prompt_tokens_details.cached_tokens`, `completion_tokens_details.reasoning_tokens`) are
   * sent as given.
   */
  usage?: {
    prompt_tokens: number;
    completion_tokens: number;
    prompt_tokens_details?: Record<string, number>;
    completion_tokens_details?: Record<string, number>;
  } | null;
  /** Destroy the connection after this many content chunks (before any finish chunk). */
  cutAfter?: number;
  /** Destroy the connection right after the finish chunk (no usage chunk, no [DONE]). */
  cutAfterFinish?: boolean;
  /** An in-stream `data: {"error": ...}` event after the content chunks, instead of a finish. */
  streamError?: { message: string; type?: string; code?: string | null };
  /** Time between chunks. */
  chunkDelayMs?: number;
  /**
   * While it waits `chunkDelayMs`, an SSE comment (`: keep-alive`) every this many ms, as
   * routers and servers send while their model works (OpenRouter's `: OPENROUTER PROCESSING`).
   */
  commentEveryMs?: number;
  /** Leave out `data: [DONE]`. */
  omitDone?: boolean;
};

export type ReceivedRequest = {
  method: string;
  path: string;
  headers: IncomingMessage["headers"];
  // biome-ignore lint/suspicious/noExplicitAny: a JSON body, inspected by tests
  body: any;
};

/** Options of `startFakeOpenAI` (additive; provider-limit tests and bench:limits). */
export type FakeOpenAIOptions = {
  /** Answers every chat request from its body (the script is then not used). */
  // biome-ignore lint/suspicious/noExplicitAny: a JSON body
  respond?: (body: any) => FakeResponse;
  /**
   * A provider's rate limit: at most `requests` chat requests accepted per sliding `windowMs`
   * (default 60 s); beyond, `429` with `retry-after: <retryAfter>` (default "2").
   */
  rateLimit?: { requests: number; windowMs?: number; retryAfter?: string };
  /** Keep request bodies (default true; false for long benchmarks). */
  recordRequests?: boolean;
};

/** What the server saw (with `rateLimit`, or always). */
export type FakeOpenAIStats = {
  /** When each accepted chat request arrived (ms epoch). */
  accepted: number[];
  /** When each 429 was answered. */
  rateLimited: number[];
  inFlight: number;
  maxInFlight: number;
};

/** Chat answers for sessions of two model calls: a `sleep` tool call, then (after its result) text. */
// biome-ignore lint/suspicious/noExplicitAny: a JSON body
export function twoCallResponder(body: any): FakeResponse {
  const messages = (body?.messages ?? []) as { role?: string }[];
  if (messages.at(-1)?.role === "tool") return { text: ["done"] };
  return {
    toolCalls: [
      { id: `call_${Math.random().toString(36).slice(2, 10)}`, name: "sleep", arguments: '{"ms":1}' },
    ],
  };
}

/** The most requests accepted in any window of `windowMs` (a sliding window over arrivals). */
export function peakPerWindow(times: readonly number[], windowMs: number): number {
  const sorted = [...times].sort((a, b) => a - b);
  let peak = 0;
  let start = 0;
  for (let end = 0; end < sorted.length; end++) {
    while (sorted[end]! - sorted[start]! >= windowMs) start++;
    peak = Math.max(peak, end - start + 1);
  }
  return peak;
}

/**
 * Arrivals checked against a rate of one request per `intervalMs` from `since` on, as the
 * fleet's limits grant them (GCRA without a burst): the k-th arrival (from 0) may come no
 * earlier than `since + k × intervalMs`. A request is sent at its slot or later and its
 * arrival is stamped later still (by however long a loaded machine keeps the sender or this
 * server's event loop waiting), so delays only move arrivals later: arrivals of requests
 * granted at that rate always pass, whatever the load. A sliding window over arrival times
 * does not: a late request stamped next to the on-time ones after it puts 22 into a 10 s
 * window of 20 slots. `since` must be no later than the first slot (e.g. when the first run
 * started). Returns the arrivals that came too early, and the least margin (ms) by which
 * the others kept to the rate (how tight the check was).
 */
export function aheadOfRate(
  times: readonly number[],
  since: number,
  intervalMs: number,
): { early: { k: number; at: number; earliest: number }[]; marginMs: number } {
  const sorted = [...times].sort((a, b) => a - b);
  const early: { k: number; at: number; earliest: number }[] = [];
  let marginMs = Number.POSITIVE_INFINITY;
  for (const [k, at] of sorted.entries()) {
    const earliest = since + k * intervalMs;
    if (at < earliest) early.push({ k, at, earliest });
    marginMs = Math.min(marginMs, at - earliest);
  }
  return { early, marginMs };
}

export type FakeOpenAI = {
  /** The base URL to configure, ending in `/v1`. */
  url: string;
  requests: ReceivedRequest[];
  /** What the server saw: accepted and rate-limited requests, concurrency. */
  stats: FakeOpenAIStats;
  /** Appends responses to the script. */
  enqueue(...responses: FakeResponse[]): void;
  /** Responses still scripted. */
  pending(): number;
  close(): Promise<void>;
};

const DEFAULT_USAGE = { prompt_tokens: 11, completion_tokens: 7 };

function split(text: string, parts: number): string[] {
  if (text.length === 0) return [""];
  const size = Math.max(1, Math.ceil(text.length / parts));
  const out: string[] = [];
  for (let i = 0; i < text.length; i += size) out.push(text.slice(i, i + size));
  return out;
}

/** The `delta` objects of a response, one per content chunk. */
export function contentDeltas(response: FakeResponse): Record<string, unknown>[] {
  const deltas: Record<string, unknown>[] = [];
  for (const piece of response.text ?? []) deltas.push({ content: piece });
  for (const [index, call] of (response.toolCalls ?? []).entries()) {
    const fragments = split(call.arguments, call.fragments ?? 3);
    deltas.push({
      tool_calls: [
        {
          index,
          ...(call.id === undefined ? {} : { id: call.id }),
          type: "function",
          function: { name: call.name, arguments: "" },
        },
      ],
    });
    for (const fragment of fragments) {
      deltas.push({ tool_calls: [{ index, function: { arguments: fragment } }] });
    }
  }
  deltas.push(...(response.deltas ?? []));
  return deltas;
}

const sleep = (ms: number) => new Promise((resolve) => setTimeout(resolve, ms));

/** OpenAI's limit on a tool call id sent back (`tool_calls[].id`, `tool_call_id`). */
const MAX_TOOL_ID = 40;

/** The most tools a chat completion request may list (400 `array_above_max_length`). */
const MAX_TOOLS = 128;
/** The longest `tools[].function.description` OpenAI accepts (400 `string_above_max_length`). */
const MAX_DESCRIPTION = 1024;

/** A function name OpenAI accepts, in `tools` and in the calls of a history alike. */
const TOOL_NAME = /^[a-zA-Z0-9_-]{1,64}$/;

/**
 * A tool call OpenAI refuses: an id too long (400 `string_above_max_length`), a name outside
 * TOOL_NAME (400 `invalid_value`); or null.
 */
function invalidToolId(body: unknown): { message: string; param: string; code?: string } | null {
  const tools = (body as { tools?: unknown })?.tools;
  if (Array.isArray(tools)) {
    if (tools.length > MAX_TOOLS)
      return {
        param: "tools",
        code: "array_above_max_length",
        message: `Invalid 'tools': array too long. Expected an array with maximum length ${MAX_TOOLS}, but got an array with length ${tools.length} instead.`,
      };
    for (const [i, tool] of (
      tools as { function?: { name?: unknown; description?: unknown; parameters?: { type?: unknown } } }[]
    ).entries()) {
      const parameters = tool.function?.parameters;
      if (parameters !== undefined && parameters.type !== "object")
        return {
          param: `tools[${i}].function.parameters`,
          code: "invalid_function_parameters",
          message: `Invalid schema for function '${String(tool.function?.name)}': schema must be a JSON Schema of 'type: "object"', got 'type: "${String(parameters.type ?? "None")}"'.`,
        };
      const description = tool.function?.description;
      if (typeof description === "string" && description.length > MAX_DESCRIPTION)
        return {
          param: `tools[${i}].function.description`,
          message: `Invalid 'tools[${i}].function.description': string too long. Expected a string with maximum length ${MAX_DESCRIPTION}, but got a string with length ${description.length} instead.`,
        };
    }
  }
  const messages = (body as { messages?: unknown })?.messages;
  if (!Array.isArray(messages)) return null;
  const tooLong = (param: string, id: unknown) =>
    typeof id === "string" && id.length > MAX_TOOL_ID
      ? {
          param,
          message: `Invalid '${param}': string too long. Expected a string with maximum length ${MAX_TOOL_ID}, but got a string with length ${id.length} instead.`,
        }
      : null;
  for (const [i, m] of (
    messages as { tool_calls?: { id?: unknown }[]; tool_call_id?: unknown }[]
  ).entries()) {
    for (const [j, call] of (m.tool_calls ?? []).entries()) {
      const error = tooLong(`messages[${i}].tool_calls[${j}].id`, call.id);
      if (error) return error;
      const name = (call as { function?: { name?: unknown } }).function?.name;
      if (typeof name !== "string" || !TOOL_NAME.test(name))
        return {
          param: `messages[${i}].tool_calls[${j}].function.name`,
          code: "invalid_value",
          message: `Invalid 'messages[${i}].tool_calls[${j}].function.name': string does not match pattern. Expected a string that matches the pattern '^[a-zA-Z0-9_-]+$'.`,
        };
    }
    const error = tooLong(`messages[${i}].tool_call_id`, m.tool_call_id);
    if (error) return error;
  }
  return null;
}

function write(res: ServerResponse, data: string): Promise<void> {
  return new Promise((resolve) => {
    if (res.destroyed) return resolve();
    res.write(data, () => resolve());
  });
}

async function readBody(req: IncomingMessage): Promise<string> {
  let text = "";
  for await (const chunk of req) text += chunk;
  return text;
}

export async function startFakeOpenAI(
  script: FakeResponse[] = [],
  options: FakeOpenAIOptions = {},
): Promise<FakeOpenAI> {
  const queue: { response: FakeResponse; left: number }[] = [];
  const requests: ReceivedRequest[] = [];
  const stats: FakeOpenAIStats = { accepted: [], rateLimited: [], inFlight: 0, maxInFlight: 0 };
  const enqueue = (...responses: FakeResponse[]) => {
    for (const response of responses) queue.push({ response, left: response.times ?? 1 });
  };
  enqueue(...script);

  const server = createServer(async (req, res) => {
    const raw = await readBody(req);
    let body: unknown;
    try {
      body = raw ? JSON.parse(raw) : undefined;
    } catch {
      body = raw;
    }
    if (options.recordRequests !== false)
      requests.push({ method: req.method ?? "", path: req.url ?? "", headers: req.headers, body });
    if (req.method !== "POST" || req.url !== "/v1/chat/completions") {
      res.writeHead(404, { "content-type": "application/json" });
      res.end(JSON.stringify({ error: { message: `fake-openai: no route ${req.method} ${req.url}` } }));
      return;
    }
    const now = Date.now();
    if (options.rateLimit) {
      const { requests: allowed, windowMs = 60_000, retryAfter = "2" } = options.rateLimit;
      let inWindow = 0;
      for (let i = stats.accepted.length - 1; i >= 0 && stats.accepted[i]! > now - windowMs; i--) inWindow++;
      if (inWindow >= allowed) {
        stats.rateLimited.push(now);
        res.writeHead(429, { "content-type": "application/json", "retry-after": retryAfter });
        res.end(
          JSON.stringify({
            error: {
              message: "fake-openai: rate limit reached",
              type: "rate_limit_error",
              param: null,
              code: "rate_limit_exceeded",
            },
          }),
        );
        return;
      }
    }
    // What the fake was taught, then every documented rule (wire-validators.ts).
    const sent = body as Record<string, unknown>;
    const broken = Array.isArray(sent?.messages) ? chatViolations(sent)[0] : undefined;
    const invalid =
      invalidToolId(body) ??
      (broken === undefined ? null : { message: broken, param: "messages", code: "invalid_value" });
    if (invalid) {
      res.writeHead(400, { "content-type": "application/json" });
      res.end(
        JSON.stringify({
          error: {
            message: invalid.message,
            type: "invalid_request_error",
            param: invalid.param,
            code: invalid.code ?? "string_above_max_length",
          },
        }),
      );
      return;
    }
    stats.accepted.push(now);
    if (options.respond) {
      stats.inFlight++;
      stats.maxInFlight = Math.max(stats.maxInFlight, stats.inFlight);
      try {
        await answer(
          options.respond(body),
          body as { model?: string; stream_options?: { include_usage?: boolean } },
          res,
        );
      } finally {
        stats.inFlight--;
      }
      return;
    }
    const next = queue[0];
    if (!next) {
      res.writeHead(500, { "content-type": "application/json" });
      res.end(JSON.stringify({ error: { message: "fake-openai: no response scripted", type: "fake" } }));
      return;
    }
    if (--next.left <= 0) queue.shift();
    await answer(
      next.response,
      body as { model?: string; stream_options?: { include_usage?: boolean } },
      res,
    );
  });

  async function answer(
    response: FakeResponse,
    body: { model?: string; stream_options?: { include_usage?: boolean } } | undefined,
    res: ServerResponse,
  ): Promise<void> {
    if (response.hold) await response.hold;
    if (response.delayMs) await sleep(response.delayMs);
    if (res.destroyed) return;
    const status = response.status ?? 200;
    if (status !== 200) {
      const errorBody = response.errorBody ?? {
        error: {
          message: response.errorMessage ?? `fake-openai: status ${status}`,
          type: response.errorType ?? "invalid_request_error",
          param: null,
          code: response.errorCode ?? null,
        },
      };
      res.writeHead(status, { "content-type": "application/json", ...response.headers });
      res.end(JSON.stringify(errorBody));
      return;
    }
    res.writeHead(200, {
      "content-type": "text/event-stream",
      "cache-control": "no-cache",
      connection: "keep-alive",
      ...response.headers,
    });
    res.flushHeaders();
    const base = {
      id: `chatcmpl-${Math.random().toString(36).slice(2, 10)}`,
      object: "chat.completion.chunk",
      created: Math.floor(Date.now() / 1000),
      model: body?.model ?? "fake",
    };
    const withUsage = body?.stream_options?.include_usage === true;
    const chunk = (delta: Record<string, unknown>, finishReason: string | null) =>
      `data: ${JSON.stringify({
        ...base,
        choices: [{ index: 0, delta, logprobs: null, finish_reason: finishReason }],
        ...(withUsage ? { usage: null } : {}),
      })}\n\n`;
    const pause = async () => {
      if (!response.chunkDelayMs) return;
      const until = Date.now() + response.chunkDelayMs;
      while (response.commentEveryMs && Date.now() + response.commentEveryMs < until && !res.destroyed) {
        await sleep(response.commentEveryMs);
        await write(res, ": keep-alive\n\n");
      }
      await sleep(Math.max(0, until - Date.now()));
    };

    await write(res, chunk({ role: "assistant", content: "" }, null));
    const deltas = contentDeltas(response);
    for (const [i, delta] of deltas.entries()) {
      if (response.cutAfter !== undefined && i >= response.cutAfter) {
        res.destroy();
        return;
      }
      await pause();
      await write(res, chunk(delta, null));
    }
    if (response.cutAfter !== undefined) {
      res.destroy();
      return;
    }
    if (response.streamError) {
      await write(
        res,
        `data: ${JSON.stringify({ error: { type: "server_error", code: null, ...response.streamError } })}\n\n`,
      );
      res.end();
      return;
    }
    const finishReason =
      response.finishReason === undefined
        ? (response.toolCalls?.length ?? 0) > 0
          ? "tool_calls"
          : "stop"
        : response.finishReason;
    if (finishReason !== null) {
      await pause();
      await write(res, chunk({}, finishReason));
      if (response.cutAfterFinish) {
        res.destroy();
        return;
      }
    }
    const usage = response.usage === undefined ? DEFAULT_USAGE : response.usage;
    if (withUsage && usage !== null) {
      await write(
        res,
        `data: ${JSON.stringify({
          ...base,
          choices: [],
          usage: { ...usage, total_tokens: usage.prompt_tokens + usage.completion_tokens },
        })}\n\n`,
      );
    }
    if (!response.omitDone) await write(res, "data: [DONE]\n\n");
    res.end();
  }

  await new Promise<void>((resolve) => server.listen(0, "127.0.0.1", resolve));
  const { port } = server.address() as AddressInfo;
  return {
    url: `http://127.0.0.1:${port}/v1`,
    requests,
    stats,
    enqueue,
    pending: () => queue.reduce((n, q) => n + q.left, 0),
    close: () =>
      new Promise<void>((resolve) => {
        server.closeAllConnections();
        server.close(() => resolve());
      }),
  };
}
