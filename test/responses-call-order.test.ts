/**
 * A Responses API stream whose `response.output_item.done` events repeat an item or come out
 * of their `output_index` order (a proxy that replays an event, a server that finishes its
 * items in parallel): the step's calls are the response's items, one per `output_index`, in
 * that order — the order of the step's provider state, which pairs its k-th `function_call`
 * item with the step's k-th call when the history goes back. Real SDK, real HTTP: a local
 * server writes the events as given.
 */
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import type { AssistantMessage, Message } from "../src/shared/messages.js";
import { callModel } from "../src/worker/call-model.js";
import { OpenAIModel } from "../src/worker/models/openai.js";
import { buildResponsesBody } from "../src/worker/models/openai-responses-request.js";
import { type FixedSseServer, startFixedSse } from "./support/fixed-sse-server.js";

let upstream: FixedSseServer;
let url = "";

beforeAll(async () => {
  upstream = await startFixedSse();
  url = `${upstream.url}/v1`;
});
afterAll(() => upstream.close());

function sse(events: Record<string, unknown>[]): string {
  return events.map((event) => `event: ${event.type}\ndata: ${JSON.stringify(event)}\n\n`).join("");
}

const reasoning = (n: number) => ({
  type: "reasoning",
  id: `rs_${n}`,
  summary: [],
  encrypted_content: `enc-${n}`,
});
const call = (n: number) => ({
  type: "function_call",
  id: `fc_${n}`,
  call_id: `call_${n}`,
  name: `tool_${n}`,
  arguments: JSON.stringify({ n }),
  status: "completed",
});

function done(index: number, item: Record<string, unknown>) {
  return { type: "response.output_item.done", output_index: index, item };
}

function completed(output: Record<string, unknown>[]) {
  return {
    type: "response.completed",
    response: { id: "resp_1", status: "completed", output, usage: { input_tokens: 10, output_tokens: 5 } },
  };
}

function model() {
  return new OpenAIModel(
    { provider: "openai", model: "o4-test", baseUrl: url, api: "responses" },
    { apiKey: "k" },
  );
}

async function step(): Promise<AssistantMessage> {
  const history: Message[] = [{ role: "user", content: "go" }];
  const result = await callModel(
    model(),
    { sessionId: "s", history, tools: [], signal: new AbortController().signal },
    { sleep: async () => {} },
  );
  if (!result.ok) throw new Error(result.error);
  return result.message;
}

describe("Responses API: the output items of a step", () => {
  it("a function_call item sent twice at one output_index is one call (the tool is not run twice)", async () => {
    const output = [reasoning(0), call(1)];
    upstream.body = sse([done(0, reasoning(0)), done(1, call(1)), done(1, call(1)), completed(output)]);
    const message = await step();
    expect(message.toolCalls?.map((c) => c.id)).toEqual(["call_1"]);
  });

  it("items finished out of their order give the calls in output_index order, each replayed with its own item", async () => {
    const output = [reasoning(0), call(1), reasoning(2), call(3)];
    upstream.body = sse([
      done(2, reasoning(2)),
      done(3, call(3)),
      done(0, reasoning(0)),
      done(1, call(1)),
      completed(output),
    ]);
    const message = await step();
    expect(message.toolCalls?.map((c) => c.id)).toEqual(["call_1", "call_3"]);
    const history: Message[] = [
      { role: "user", content: "go" },
      message,
      { role: "tool", toolCallId: "call_1", name: "tool_1", content: "one", success: true },
      { role: "tool", toolCallId: "call_3", name: "tool_3", content: "three", success: true },
    ];
    const sent = buildResponsesBody(
      { model: "o4-test" },
      { sessionId: "s", history, tools: [], signal: new AbortController().signal },
      model().target,
    ).input as unknown as Record<string, unknown>[];
    const calls = sent.filter((item) => item.type === "function_call");
    expect(calls.map((item) => [item.id, item.call_id, item.arguments])).toEqual([
      ["fc_1", "call_1", JSON.stringify({ n: 1 })],
      ["fc_3", "call_3", JSON.stringify({ n: 3 })],
    ]);
  });

  it("items sent without an output_index are each kept, in the order they came", async () => {
    const noIndex = (item: Record<string, unknown>) => ({ type: "response.output_item.done", item });
    const added = (item: Record<string, unknown>) => ({ type: "response.output_item.added", item });
    upstream.body = sse([
      added(call(1)),
      noIndex(call(1)),
      added(call(2)),
      noIndex(call(2)),
      completed([call(1), call(2)]),
    ]);
    const message = await step();
    expect(message.toolCalls?.map((c) => c.id)).toEqual(["call_1", "call_2"]);
  });

  it("a function_call item added but never done when the response completes makes the step cut, not whole without its call", async () => {
    const text = {
      type: "message",
      id: "msg_0",
      role: "assistant",
      content: [{ type: "output_text", text: "Writing." }],
    };
    upstream.body = sse([
      { type: "response.output_text.delta", output_index: 0, delta: "Writing." },
      done(0, text),
      {
        type: "response.output_item.added",
        output_index: 1,
        item: { ...call(1), arguments: "", status: "in_progress" },
      },
      { type: "response.function_call_arguments.delta", output_index: 1, delta: '{"n":1}' },
      completed([text, call(1)]),
    ]);
    const message = await step();
    expect(message).toMatchObject({ content: "Writing.", stopReason: "interrupted" });
    expect(message.toolCalls).toBeUndefined();
  });

  it("a call added with its output_index and done without one is done", async () => {
    const { output_index: _, ...doneWithout } = done(0, call(1));
    upstream.body = sse([
      { type: "response.output_item.added", output_index: 0, item: { ...call(1), arguments: "" } },
      doneWithout,
      completed([call(1)]),
    ]);
    const message = await step();
    expect(message).toMatchObject({ stopReason: "tool_use", toolCalls: [{ id: "call_1" }] });
  });
});
