/**
 * A local Anthropic Messages API for tests: a node:http server on 127.0.0.1 (port 0) that
 * answers `POST /v1/messages` from a script, speaking the real wire protocol — server-sent
 * events `message_start`, `ping`, `content_block_start` / `_delta` / `_stop`, `message_delta`,
 * `message_stop`, and `error` events — or an HTTP error with the API's JSON error body
 * `{ "type": "error", "error": { "type", "message" } }`.
 *
 * Each request takes the next scripted response; once the script is used up the server
 * answers 500 `api_error` "no scripted response left", so an unexpected call shows up as a
 * failure and in `requests`.
 *
 * Events of a streamed response, in order (what `cutAfterEvents` / `errorAfterEvents`
 * count; pings are not counted): `message_start`; per block `content_block_start`, one
 * delta per chunk, `content_block_stop`; `message_delta`; `message_stop`.
 *
 * Like the real API, it rejects (400 `invalid_request_error`) what the API rejects about
 * thinking and caching (`validateRequest`): with `thinking` on, a final assistant turn that
 * asks for tools, or that ends the request, must start with its thinking block (its last
 * message, or the first of the tool loop it ends); every thinking block sent back must be
 * one this server sent, unmodified (signature checked against its text); redacted blocks must
 * be ones it sent; an assistant message holding a thinking block must start with one, and a
 * final one must not end with one (nor hold one at all with thinking off);
 * `budget_tokens` must be ≥ 1024 and < `max_tokens`; at most 4
 * `cache_control` breakpoints, none on a thinking block; a tool's `input_schema` of another
 * type than `"object"`; tool ids match `^[a-zA-Z0-9_-]+$`
 * and `tool_use` ids are unique across the request;
 * no empty text block, and none of whitespace only unless its message has other text (a
 * `tool_result`'s string content included: it is a text block of its own). On top of these, a
 * request breaking any rule of `anthropicViolations` (wire-validators.ts: tool_use / tool_result
 * pairing, their places, an empty request…) is refused with the rule as its message.
 */
import { createHash } from "node:crypto";
import { createServer, type IncomingMessage, type Server, type ServerResponse } from "node:http";
import type { AddressInfo } from "node:net";
import { anthropicViolations } from "./wire-validators.js";

export type FakeBlock =
  | {
      type: "text";
      text: string;
      /** How the text streams; default: the whole text in one delta. Must join to `text`. */
      chunks?: string[];
    }
  | {
      type: "thinking";
      thinking: string;
      /**
       * Default: derived from the text (what `validateRequest` checks). `null`: no
       * `signature_delta` is sent, so the block has none (what the API refuses back).
       */
      signature?: string | null;
    }
  | { type: "redacted_thinking"; data: string }
  | {
      type: "tool_use";
      id: string;
      name: string;
      input: Record<string, unknown>;
      /** `partial_json` fragments; default: JSON.stringify(input) in 3 pieces. Need not parse. */
      jsonChunks?: string[];
    };

export type FakeStream = {
  blocks?: FakeBlock[];
  /** `null` sends a message_delta without a stop reason. Default `end_turn`. */
  stopReason?: string | null;
  usage?: {
    input_tokens: number;
    output_tokens: number;
    cache_creation_input_tokens?: number;
    cache_read_input_tokens?: number;
  };
  /** Write this many events (pings excluded), then destroy the socket. */
  cutAfterEvents?: number;
  /** After this many events, send an `error` event and end the response. */
  errorAfterEvents?: number;
  errorEvent?: { type: string; message: string };
  /** Wait before the headers, and between events. */
  headersDelayMs?: number;
  eventDelayMs?: number;
  /** Send a `ping` after message_start (default true). */
  ping?: boolean;
  /**
   * How long the model thinks without streaming its thinking (`thinking.display: "omitted"`,
   * the default of recent models): after the first thinking block opens, only a `ping` every
   * `pingEveryMs` (none without it) for this long, then the rest.
   */
  thinkingMs?: number;
  pingEveryMs?: number;
  /** Leave out `message_stop`: the response ends cleanly right after `message_delta`. */
  omitMessageStop?: boolean;
};

export type FakeHttpError = {
  status: number;
  headers?: Record<string, string>;
  error: { type: string; message: string };
};

export type FakeResponse = FakeStream | FakeHttpError;

export type RecordedRequest = {
  method: string;
  path: string;
  headers: IncomingMessage["headers"];
  body: Record<string, unknown> & { messages: { role: string; content: unknown }[] };
  /** When the request arrived (Date.now()). */
  at: number;
  /** Set once the client closed the connection before the response was complete. */
  clientClosed: boolean;
};

export type FakeAnthropic = {
  /** Base URL for the model config (`baseUrl`), e.g. http://127.0.0.1:40123 */
  url: string;
  requests: RecordedRequest[];
  /** Adds responses to the end of the script. */
  script(...responses: FakeResponse[]): void;
  /** Responses not used yet. */
  pending(): number;
  close(): Promise<void>;
};

const sleep = (ms: number) => new Promise((resolve) => setTimeout(resolve, ms));

function isHttpError(response: FakeResponse): response is FakeHttpError {
  return "status" in response;
}

function splitInThree(text: string): string[] {
  const size = Math.max(1, Math.ceil(text.length / 3));
  const out: string[] = [];
  for (let i = 0; i < text.length; i += size) out.push(text.slice(i, i + size));
  return out.length > 0 ? out : [""];
}

/** The data events of a streamed response, in wire order (pings excluded). */
export function streamEvents(
  response: FakeStream,
  model: string,
  messageId: string,
): { event: string; data: unknown }[] {
  const usage = response.usage ?? { input_tokens: 10, output_tokens: 5 };
  const events: { event: string; data: unknown }[] = [
    {
      event: "message_start",
      data: {
        type: "message_start",
        message: {
          id: messageId,
          type: "message",
          role: "assistant",
          model,
          content: [],
          stop_reason: null,
          stop_sequence: null,
          usage: {
            input_tokens: usage.input_tokens,
            cache_creation_input_tokens: usage.cache_creation_input_tokens ?? 0,
            cache_read_input_tokens: usage.cache_read_input_tokens ?? 0,
            output_tokens: 1,
          },
        },
      },
    },
  ];
  for (const [index, block] of (response.blocks ?? []).entries()) {
    if (block.type === "text") {
      events.push({
        event: "content_block_start",
        data: { type: "content_block_start", index, content_block: { type: "text", text: "" } },
      });
      for (const text of block.chunks ?? [block.text])
        events.push({
          event: "content_block_delta",
          data: { type: "content_block_delta", index, delta: { type: "text_delta", text } },
        });
    } else if (block.type === "thinking") {
      events.push({
        event: "content_block_start",
        data: {
          type: "content_block_start",
          index,
          content_block: { type: "thinking", thinking: "", signature: "" },
        },
      });
      for (const thinking of splitInThree(block.thinking))
        events.push({
          event: "content_block_delta",
          data: { type: "content_block_delta", index, delta: { type: "thinking_delta", thinking } },
        });
      if (block.signature !== null)
        events.push({
          event: "content_block_delta",
          data: {
            type: "content_block_delta",
            index,
            delta: { type: "signature_delta", signature: block.signature ?? signatureOf(block.thinking) },
          },
        });
    } else if (block.type === "redacted_thinking") {
      events.push({
        event: "content_block_start",
        data: {
          type: "content_block_start",
          index,
          content_block: { type: "redacted_thinking", data: block.data },
        },
      });
    } else {
      events.push({
        event: "content_block_start",
        data: {
          type: "content_block_start",
          index,
          content_block: { type: "tool_use", id: block.id, name: block.name, input: {} },
        },
      });
      for (const partial_json of block.jsonChunks ?? splitInThree(JSON.stringify(block.input)))
        events.push({
          event: "content_block_delta",
          data: { type: "content_block_delta", index, delta: { type: "input_json_delta", partial_json } },
        });
    }
    events.push({ event: "content_block_stop", data: { type: "content_block_stop", index } });
  }
  const stopReason = response.stopReason === undefined ? "end_turn" : response.stopReason;
  events.push({
    event: "message_delta",
    data: {
      type: "message_delta",
      delta: { stop_reason: stopReason, stop_sequence: null },
      // As the API sends it today: cumulative counts, the input ones repeated from message_start.
      usage: {
        input_tokens: usage.input_tokens,
        cache_creation_input_tokens: usage.cache_creation_input_tokens ?? 0,
        cache_read_input_tokens: usage.cache_read_input_tokens ?? 0,
        output_tokens: usage.output_tokens,
      },
    },
  });
  if (!response.omitMessageStop) events.push({ event: "message_stop", data: { type: "message_stop" } });
  return events;
}

/** The signature this server gives a thinking text (a real one is opaque; this one is checkable). */
export function signatureOf(thinking: string): string {
  return `sig_${createHash("sha256").update(thinking).digest("base64url")}`;
}

type Block = Record<string, unknown> & { type?: unknown };

/** What the API accepts as a tool_use id. */
const TOOL_ID = /^[a-zA-Z0-9_-]+$/;

/** What the real API refuses about thinking and caching (see the file comment), or null. */
export function validateRequest(body: Record<string, unknown>, redacted: ReadonlySet<string>): string | null {
  const messages = (body.messages ?? []) as { role: string; content: unknown }[];
  const blocksOf = (content: unknown): Block[] => (Array.isArray(content) ? (content as Block[]) : []);
  const thinking = body.thinking as { type?: string; budget_tokens?: number } | undefined;
  if (thinking?.type === "enabled") {
    const budget = thinking.budget_tokens ?? 0;
    if (budget < 1024) return "thinking.enabled.budget_tokens: Input should be greater than or equal to 1024";
    if (budget >= Number(body.max_tokens))
      return "`max_tokens` must be greater than `thinking.budget_tokens`";
  }
  let breakpoints = 0;
  const count = (block: Block, where: string): string | null => {
    if (block.cache_control == null) return null;
    if (block.type === "thinking" || block.type === "redacted_thinking")
      return `${where}.cache_control: cache_control cannot be set for thinking blocks`;
    breakpoints++;
    return null;
  };
  // Text blocks: never empty, and whitespace only only beside other text of the same message
  // (what the API answers to each, as measured against it and reported publicly).
  const blank = (blocks: Block[], where: string): string | null => {
    const texts = blocks.filter((b) => b.type === "text").map((b) => String(b.text));
    if (texts.some((t) => t === "")) return `${where}: text content blocks must be non-empty`;
    if (texts.length > 0 && texts.every((t) => t.trim() === ""))
      return `${where}: text content blocks must contain non-whitespace text`;
    return null;
  };
  const systemBlank = blank(blocksOf(body.system), "system");
  if (systemBlank) return systemBlank;
  for (const [i, block] of blocksOf(body.system).entries()) {
    const error = count(block, `system.${i}`);
    if (error) return error;
  }
  for (const [i, tool] of ((body.tools ?? []) as Block[]).entries()) {
    // The API validates a custom tool's schema as an object's: "tools.0.custom.input_schema.type:
    // Input should be 'object'" (and "Field required" without one).
    const schema = tool.input_schema as { type?: unknown } | undefined;
    if (schema?.type !== "object")
      return `tools.${i}.custom.input_schema.type: ${schema?.type === undefined ? "Field required" : "Input should be 'object'"}`;
    const error = count(tool, `tools.${i}`);
    if (error) return error;
  }
  /** `tool_use` ids seen in the request: the API wants them unique across all its messages. */
  const toolUseIds = new Set<string>();
  for (const [m, message] of messages.entries()) {
    const blankText = blank(blocksOf(message.content), "messages");
    if (blankText) return blankText;
    const first = blocksOf(message.content)[0]?.type;
    if (
      message.role === "assistant" &&
      blocksOf(message.content).some((b) => b.type === "thinking" || b.type === "redacted_thinking") &&
      first !== "thinking" &&
      first !== "redacted_thinking"
    )
      return `messages.${m}.content.0: If an assistant message contains any thinking blocks, the first block must be thinking or redacted_thinking. Found ${String(first)}.`;
    for (const [b, block] of blocksOf(message.content).entries()) {
      const where = `messages.${m}.content.${b}`;
      const error = count(block, where);
      if (error) return error;
      if (block.type === "thinking" && block.signature !== signatureOf(String(block.thinking)))
        return `${where}: Invalid \`signature\` in \`thinking\` block`;
      if (block.type === "redacted_thinking" && !redacted.has(String(block.data)))
        return `${where}: Invalid \`data\` in \`redacted_thinking\` block`;
      if (block.type === "tool_use" && !TOOL_ID.test(String(block.id)))
        return `${where}.tool_use.id: String should match pattern '^[a-zA-Z0-9_-]+$'`;
      if (block.type === "tool_use") {
        if (toolUseIds.has(String(block.id))) return `${where}: \`tool_use\` ids must be unique`;
        toolUseIds.add(String(block.id));
      }
      if (block.type === "tool_result" && !TOOL_ID.test(String(block.tool_use_id)))
        return `${where}.tool_result.tool_use_id: String should match pattern '^[a-zA-Z0-9_-]+$'`;
      // A result's string content is one text block: the same rules hold for it.
      if (block.type === "tool_result" && typeof block.content === "string") {
        const blankResult = blank([{ type: "text", text: block.content }], "messages");
        if (blankResult) return blankResult;
      }
    }
  }
  const final = messages.at(-1);
  const finalType = blocksOf(final?.content).at(-1)?.type;
  if (final?.role === "assistant" && (finalType === "thinking" || finalType === "redacted_thinking"))
    return `messages.${messages.length - 1}: The final block in an assistant message cannot be \`thinking\`.`;
  const finalThinking = blocksOf(final?.content).findIndex(
    (b) => b.type === "thinking" || b.type === "redacted_thinking",
  );
  if (final?.role === "assistant" && (!thinking || thinking.type === "disabled") && finalThinking >= 0)
    return `messages.${messages.length - 1}.content.${finalThinking}: When thinking is disabled, an \`assistant\` message in the final position cannot contain \`thinking\`. To use thinking blocks, enable \`thinking\` in your request.`;
  if (breakpoints > 4)
    return `A maximum of 4 blocks with cache_control may be provided. Found ${breakpoints}.`;
  if (thinking && thinking.type !== "disabled") {
    const lastAssistant = messages.findLastIndex((m) => m.role === "assistant");
    const turn = messages[lastAssistant];
    const blocks = blocksOf(turn?.content);
    // The assistant turn a tool loop makes (its results are part of it: "tool use loops are
    // part of the assistant turn", extended-thinking docs) may start with its thinking block
    // in its first step (not a final turn the model is to continue): without interleaved
    // thinking the model thinks once, at the turn's start, and its steps after tool results
    // start with text or tool_use.
    const userTurn = messages.findLastIndex(
      (m) => m.role === "user" && !blocksOf(m.content).some((b) => b.type === "tool_result"),
    );
    const opening = messages.slice(userTurn + 1).find((m) => m.role === "assistant");
    const openingFirst = blocksOf(opening?.content)[0]?.type;
    const opened = openingFirst === "thinking" || openingFirst === "redacted_thinking";
    const continued = lastAssistant === messages.length - 1;
    // A tool turn, or a final assistant turn the model is to continue (a prefill).
    if (turn && (continued || (!opened && blocks.some((b) => b.type === "tool_use")))) {
      const first = blocks[0]?.type;
      if (first !== "thinking" && first !== "redacted_thinking")
        return `messages.${lastAssistant}.content.0.type: Expected \`thinking\` or \`redacted_thinking\`, but found \`${String(first)}\`. When \`thinking\` is enabled, a final \`assistant\` message must start with a thinking block (preceeding the lastmost set of \`tool_use\` and \`tool_result\` blocks).`;
    }
  }
  return null;
}

/** Whether a stream event opens a thinking block. */
function opensThinking(data: unknown): boolean {
  const event = data as { type?: string; content_block?: { type?: string } };
  return event.type === "content_block_start" && event.content_block?.type === "thinking";
}

function write(res: ServerResponse, event: string, data: unknown): Promise<void> {
  return new Promise((resolve, reject) =>
    res.write(`event: ${event}\ndata: ${JSON.stringify(data)}\n\n`, (error) =>
      error ? reject(error) : resolve(),
    ),
  );
}

async function readBody(req: IncomingMessage): Promise<string> {
  let text = "";
  for await (const chunk of req) text += chunk;
  return text;
}

export async function startFakeAnthropic(initial: FakeResponse[] = []): Promise<FakeAnthropic> {
  const script = [...initial];
  const requests: RecordedRequest[] = [];
  const open = new Set<ServerResponse>();
  /** `data` of the redacted thinking blocks sent, which may come back. */
  const redacted = new Set<string>();

  async function answer(req: IncomingMessage, res: ServerResponse): Promise<void> {
    const at = Date.now();
    const raw = await readBody(req);
    const body = raw ? JSON.parse(raw) : {};
    const recorded: RecordedRequest = {
      method: req.method ?? "",
      path: req.url ?? "",
      headers: req.headers,
      body,
      at,
      clientClosed: false,
    };
    requests.push(recorded);
    res.on("close", () => {
      if (!res.writableFinished) recorded.clientClosed = true;
    });
    if (req.method !== "POST" || req.url !== "/v1/messages") {
      res.writeHead(404, { "content-type": "application/json" });
      res.end(JSON.stringify({ type: "error", error: { type: "not_found_error", message: "not found" } }));
      return;
    }
    // What the fake was taught, then every documented rule (wire-validators.ts).
    const invalid = validateRequest(body, redacted) ?? anthropicViolations(body)[0] ?? null;
    if (invalid !== null) {
      res.writeHead(400, { "content-type": "application/json", "request-id": `req_fake_${requests.length}` });
      res.end(JSON.stringify({ type: "error", error: { type: "invalid_request_error", message: invalid } }));
      return;
    }
    const response: FakeResponse = script.shift() ?? {
      status: 500,
      error: { type: "api_error", message: "fake-anthropic: no scripted response left" },
    };
    if (isHttpError(response)) {
      res.writeHead(response.status, {
        "content-type": "application/json",
        "request-id": `req_fake_${requests.length}`,
        ...response.headers,
      });
      res.end(JSON.stringify({ type: "error", error: response.error }));
      return;
    }
    for (const block of response.blocks ?? [])
      if (block.type === "redacted_thinking") redacted.add(block.data);
    if (response.headersDelayMs) await sleep(response.headersDelayMs);
    res.writeHead(200, {
      "content-type": "text/event-stream",
      "cache-control": "no-cache",
      "request-id": `req_fake_${requests.length}`,
    });
    res.flushHeaders();
    const events = streamEvents(response, String(body.model ?? "claude-test"), `msg_fake_${requests.length}`);
    for (const [i, { event, data }] of events.entries()) {
      if (res.destroyed) return;
      if (response.cutAfterEvents !== undefined && i >= response.cutAfterEvents) {
        // Let the client read what was sent, then break the connection mid-stream.
        await sleep(20);
        res.destroy();
        return;
      }
      if (response.errorAfterEvents !== undefined && i >= response.errorAfterEvents) {
        await write(res, "error", {
          type: "error",
          error: response.errorEvent ?? { type: "overloaded_error", message: "Overloaded" },
        });
        res.end();
        return;
      }
      if (i > 0 && response.eventDelayMs) await sleep(response.eventDelayMs);
      if (response.thinkingMs && i > 0 && opensThinking(events[i - 1]!.data)) {
        const until = Date.now() + response.thinkingMs;
        while (response.pingEveryMs && Date.now() + response.pingEveryMs < until && !res.destroyed) {
          await sleep(response.pingEveryMs);
          if (!res.destroyed) await write(res, "ping", { type: "ping" });
        }
        await sleep(Math.max(0, until - Date.now()));
      }
      if (res.destroyed) return;
      await write(res, event, data);
      if (i === 0 && response.ping !== false) await write(res, "ping", { type: "ping" });
    }
    res.end();
  }

  const server: Server = createServer((req, res) => {
    open.add(res);
    res.on("close", () => open.delete(res));
    answer(req, res).catch(() => {
      if (!res.destroyed) res.destroy();
    });
  });
  await new Promise<void>((resolve) => server.listen(0, "127.0.0.1", resolve));
  const { port } = server.address() as AddressInfo;

  return {
    url: `http://127.0.0.1:${port}`,
    requests,
    script: (...responses) => {
      script.push(...responses);
    },
    pending: () => script.length,
    close: async () => {
      for (const res of open) res.destroy();
      server.closeAllConnections();
      await new Promise<void>((resolve) => server.close(() => resolve()));
    },
  };
}
