/**
 * A model endpoint run by an attacker (or a provider having a very bad day), for tests: one
 * node:http server on 127.0.0.1 answering the three provider families — OpenAI chat
 * completions (`POST /v1/chat/completions`), the OpenAI Responses API (`POST /v1/responses`)
 * and Anthropic Messages (`POST /v1/messages`) — each request with the fault its session's
 * script names (`Fault`). The session is recognised by a marker its user message carries
 * (`HOSTILE-<key>-`); request k of a session gets the script's fault k, the last one for
 * ever after (or, cycling, fault k modulo the script's length). Every request is counted per session.
 */
import { createServer, type IncomingMessage, type Server, type ServerResponse } from "node:http";
import type { AddressInfo, Socket } from "node:net";

export type Family = "chat" | "responses" | "anthropic";

export type Fault =
  /** A valid, normal answer. */
  | { kind: "ok" }
  /** A valid answer whose text holds NUL bytes and lone surrogates. */
  | { kind: "nul" }
  /** A valid answer of this many characters of text (10 MB in the hunt). */
  | { kind: "huge"; chars: number }
  /** A valid answer cut by the output limit (`length`, `max_tokens`, `max_output_tokens`). */
  | { kind: "length" }
  /** A tool call whose arguments are not JSON. */
  | { kind: "bad_args" }
  /** A tool call naming a tool nobody has (a new name each request). */
  | { kind: "unknown_tool" }
  /** A call to the built-in `fail` tool with a new message each request: it runs, and its result is new each time. */
  | { kind: "new_failure" }
  /** This many tool calls in one answer. */
  | { kind: "many_calls"; count: number }
  /** A valid answer's stream cut at this fraction of its bytes (the socket destroyed). */
  | { kind: "cut"; at: number }
  /** 200 with a JSON content type and a body that is not JSON. */
  | { kind: "garbage_json" }
  /** 200 with an event stream of garbage. */
  | { kind: "garbage_sse" }
  /** 429 with this `retry-after` header. */
  | { kind: "r429"; retryAfter: string }
  /** An error status (500, 529). */
  | { kind: "status"; status: number }
  /** Accepts the request and never answers. */
  | { kind: "hang" }
  /** A valid answer reporting these token counts. */
  | { kind: "usage"; input: number; output: number }
  /** A 307 to another host. */
  | { kind: "redirect" };

type Call = { id: string; name: string; args: string };
type Answer = { text: string; calls: Call[]; stop: "end" | "tool" | "length"; input: number; output: number };

export type HostileEndpoint = {
  /** `http://127.0.0.1:<port>`: the Anthropic base URL; `${origin}/v1` is OpenAI's. */
  origin: string;
  /** Requests per session key. */
  requests: Map<string, number>;
  /** What each session was answered, in order (for a failure message). */
  served: Map<string, string[]>;
  /** Requests that named no session (none should). */
  unmarked: number;
  /** `cycle`: request k gets fault k modulo the script's length, instead of the last for ever. */
  script(key: string, faults: Fault[], cycle?: boolean): void;
  close(): Promise<void>;
};

const MARKER = /HOSTILE-([A-Za-z0-9]+)-/;

export async function startHostileEndpoint(): Promise<HostileEndpoint> {
  const scripts = new Map<string, { faults: Fault[]; cycle: boolean }>();
  const requests = new Map<string, number>();
  const served = new Map<string, string[]>();
  const sockets = new Set<Socket>();
  let counter = 0;
  const state = { unmarked: 0 };

  async function handle(req: IncomingMessage, res: ServerResponse): Promise<void> {
    let raw = "";
    for await (const chunk of req) raw += chunk;
    const family: Family | undefined = req.url?.endsWith("/chat/completions")
      ? "chat"
      : req.url?.endsWith("/responses")
        ? "responses"
        : req.url?.endsWith("/messages")
          ? "anthropic"
          : undefined;
    const key = MARKER.exec(raw)?.[1];
    if (!key || !family) {
      state.unmarked++;
      res.writeHead(404).end();
      return;
    }
    const n = requests.get(key) ?? 0;
    requests.set(key, n + 1);
    const { faults, cycle } = scripts.get(key) ?? { faults: [{ kind: "ok" }], cycle: false };
    const fault = faults[cycle ? n % faults.length : Math.min(n, faults.length - 1)]!;
    served.set(key, [...(served.get(key) ?? []), fault.kind]);
    counter++;
    await answer(family, fault, counter, res);
  }

  const server: Server = createServer((req, res) => {
    handle(req, res).catch(() => res.destroy());
  });
  server.on("connection", (socket) => {
    sockets.add(socket);
    socket.on("close", () => sockets.delete(socket));
  });
  await new Promise<void>((resolve) => server.listen(0, "127.0.0.1", resolve));
  const { port } = server.address() as AddressInfo;
  return {
    origin: `http://127.0.0.1:${port}`,
    requests,
    served,
    get unmarked() {
      return state.unmarked;
    },
    script: (key, faults, cycle = false) => {
      scripts.set(key, { faults, cycle });
    },
    close: async () => {
      for (const socket of sockets) socket.destroy();
      await new Promise<void>((resolve) => server.close(() => resolve()));
    },
  };
}

async function answer(family: Family, fault: Fault, n: number, res: ServerResponse): Promise<void> {
  const valid = (a: Partial<Answer>) =>
    stream(res, render(family, { text: "", calls: [], stop: "end", input: 12, output: 7, ...a }));
  switch (fault.kind) {
    case "ok":
      return valid({ text: "All done." });
    case "nul":
      return valid({ text: "a\u0000b\uD800c\uDC00d\u0000" });
    case "huge":
      return valid({ text: "x".repeat(fault.chars) });
    case "length":
      return valid({ text: `part ${n} `, stop: "length" });
    case "bad_args":
      return valid({ calls: [{ id: `call_${n}`, name: "fail", args: '{"message": nope' }], stop: "tool" });
    case "unknown_tool":
      return valid({ calls: [{ id: `call_${n}`, name: `no_such_tool_${n}`, args: "{}" }], stop: "tool" });
    case "new_failure":
      return valid({
        calls: [{ id: `call_${n}`, name: "fail", args: `{"message":"failure ${n}"}` }],
        stop: "tool",
      });
    case "many_calls":
      return valid({
        calls: Array.from({ length: fault.count }, (_, i) => ({
          id: `call_${n}_${i}`,
          name: "fail",
          args: '{"message":"m"}',
        })),
        stop: "tool",
      });
    case "cut": {
      const body = render(family, {
        text: "partial answer ".repeat(40),
        calls: [],
        stop: "end",
        input: 1,
        output: 1,
      });
      const bytes = Buffer.from(body);
      res.writeHead(200, { "content-type": "text/event-stream" });
      res.write(bytes.subarray(0, Math.floor(bytes.length * fault.at)));
      await new Promise((r) => setTimeout(r, 10));
      res.destroy();
      return;
    }
    case "garbage_json":
      res.writeHead(200, { "content-type": "application/json" }).end('{"choices": [ {oops');
      return;
    case "garbage_sse":
      res
        .writeHead(200, { "content-type": "text/event-stream" })
        .end("event: ???\ndata: {not json\n\ndata: \u0000\u00ff\n\nevent: message_start\ndata: [1,2\n\n");
      return;
    case "r429":
      res
        .writeHead(429, { "content-type": "application/json", "retry-after": fault.retryAfter })
        .end(JSON.stringify({ error: { message: "slow down", type: "rate_limit_error" } }));
      return;
    case "status":
      res
        .writeHead(fault.status, { "content-type": "application/json" })
        .end(JSON.stringify({ error: { message: "overloaded", type: "overloaded_error" } }));
      return;
    case "hang":
      return; // the socket stays open, silent, until the client gives up or the server closes
    case "usage":
      return valid({ text: "Counted.", input: fault.input, output: fault.output });
    case "redirect":
      res.writeHead(307, { location: "http://127.0.0.2:9/v1/elsewhere" }).end();
      return;
  }
}

/** Writes an event stream in pieces of at most 64 KiB. */
async function stream(res: ServerResponse, body: string): Promise<void> {
  res.writeHead(200, { "content-type": "text/event-stream" });
  const piece = 64 * 1024;
  for (let i = 0; i < body.length; i += piece) {
    if (!res.write(body.slice(i, i + piece))) await new Promise((r) => res.once("drain", r));
    if (res.destroyed) return;
  }
  res.end();
}

/** Text in deltas of at most 32 KiB. */
function pieces(text: string): string[] {
  const out: string[] = [];
  for (let i = 0; i < text.length; i += 32 * 1024) out.push(text.slice(i, i + 32 * 1024));
  return out;
}

function sse(events: { event?: string; data: unknown }[]): string {
  return events
    .map(
      ({ event, data }) =>
        `${event ? `event: ${event}\n` : ""}data: ${typeof data === "string" ? data : JSON.stringify(data)}\n\n`,
    )
    .join("");
}

function render(family: Family, a: Answer): string {
  switch (family) {
    case "chat":
      return renderChat(a);
    case "responses":
      return renderResponses(a);
    case "anthropic":
      return renderAnthropic(a);
  }
}

function renderChat(a: Answer): string {
  const chunk = (delta: unknown, finish: string | null = null) => ({
    data: {
      id: "c",
      object: "chat.completion.chunk",
      created: 0,
      model: "m",
      choices: [{ index: 0, delta, finish_reason: finish }],
    },
  });
  const finish = a.stop === "tool" ? "tool_calls" : a.stop === "length" ? "length" : "stop";
  return sse([
    chunk({ role: "assistant", content: "" }),
    ...pieces(a.text).map((content) => chunk({ content })),
    ...a.calls.map((c, index) =>
      chunk({
        tool_calls: [{ index, id: c.id, type: "function", function: { name: c.name, arguments: c.args } }],
      }),
    ),
    chunk({}, finish),
    {
      data: {
        id: "c",
        object: "chat.completion.chunk",
        created: 0,
        model: "m",
        choices: [],
        usage: { prompt_tokens: a.input, completion_tokens: a.output, total_tokens: a.input + a.output },
      },
    },
    { data: "[DONE]" },
  ]);
}

function renderResponses(a: Answer): string {
  let seq = 0;
  const out: { event: string; data: Record<string, unknown> }[] = [];
  const push = (data: Record<string, unknown>) =>
    out.push({ event: String(data.type), data: { ...data, sequence_number: seq++ } });
  const base = { id: "resp_1", object: "response", model: "m", output: [], usage: null };
  push({ type: "response.created", response: { ...base, status: "in_progress" } });
  const output: Record<string, unknown>[] = [];
  if (a.text) {
    push({
      type: "response.output_item.added",
      output_index: 0,
      item: { id: "msg_1", type: "message", role: "assistant", status: "in_progress", content: [] },
    });
    for (const delta of pieces(a.text))
      push({
        type: "response.output_text.delta",
        item_id: "msg_1",
        output_index: 0,
        content_index: 0,
        delta,
        logprobs: [],
      });
    const item = {
      id: "msg_1",
      type: "message",
      role: "assistant",
      status: "completed",
      content: [{ type: "output_text", text: a.text, annotations: [] }],
    };
    push({ type: "response.output_item.done", output_index: 0, item });
    output.push(item);
  }
  for (const c of a.calls) {
    const index = output.length;
    const item = {
      id: `fc_${c.id}`,
      type: "function_call",
      call_id: c.id,
      name: c.name,
      arguments: c.args,
      status: "completed",
    };
    push({ type: "response.output_item.added", output_index: index, item: { ...item, arguments: "" } });
    push({
      type: "response.function_call_arguments.delta",
      item_id: item.id,
      output_index: index,
      delta: c.args,
    });
    push({ type: "response.output_item.done", output_index: index, item });
    output.push(item);
  }
  const usage = {
    input_tokens: a.input,
    input_tokens_details: { cached_tokens: 0 },
    output_tokens: a.output,
    output_tokens_details: { reasoning_tokens: 0 },
    total_tokens: a.input + a.output,
  };
  if (a.stop === "length")
    push({
      type: "response.incomplete",
      response: {
        ...base,
        status: "incomplete",
        incomplete_details: { reason: "max_output_tokens" },
        output,
        usage,
      },
    });
  else push({ type: "response.completed", response: { ...base, status: "completed", output, usage } });
  return sse(out);
}

function renderAnthropic(a: Answer): string {
  const events: { event: string; data: Record<string, unknown> }[] = [
    {
      event: "message_start",
      data: {
        type: "message_start",
        message: {
          id: "msg_1",
          type: "message",
          role: "assistant",
          model: "m",
          content: [],
          stop_reason: null,
          stop_sequence: null,
          usage: { input_tokens: a.input, output_tokens: 1 },
        },
      },
    },
  ];
  let index = 0;
  if (a.text) {
    events.push({
      event: "content_block_start",
      data: { type: "content_block_start", index, content_block: { type: "text", text: "" } },
    });
    for (const text of pieces(a.text))
      events.push({
        event: "content_block_delta",
        data: { type: "content_block_delta", index, delta: { type: "text_delta", text } },
      });
    events.push({ event: "content_block_stop", data: { type: "content_block_stop", index } });
    index++;
  }
  for (const c of a.calls) {
    events.push({
      event: "content_block_start",
      data: {
        type: "content_block_start",
        index,
        content_block: { type: "tool_use", id: c.id, name: c.name, input: {} },
      },
    });
    events.push({
      event: "content_block_delta",
      data: { type: "content_block_delta", index, delta: { type: "input_json_delta", partial_json: c.args } },
    });
    events.push({ event: "content_block_stop", data: { type: "content_block_stop", index } });
    index++;
  }
  const stop = a.stop === "tool" ? "tool_use" : a.stop === "length" ? "max_tokens" : "end_turn";
  events.push({
    event: "message_delta",
    data: {
      type: "message_delta",
      delta: { stop_reason: stop, stop_sequence: null },
      usage: { input_tokens: a.input, output_tokens: a.output },
    },
  });
  events.push({ event: "message_stop", data: { type: "message_stop" } });
  return sse(events);
}
