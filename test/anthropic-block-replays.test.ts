/**
 * A Messages API stream that sends one content block again at its index (a proxy replaying
 * events): a `tool_use` block opened, streamed and stopped twice at one index is one call, as
 * a block's index is its place in the message — its tool must not run twice. Real SDK, real
 * HTTP: a local server writes the events as given.
 */
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import type { AssistantMessage } from "../src/shared/messages.js";
import { callModel, DEFAULT_RETRY_POLICY } from "../src/worker/call-model.js";
import { AnthropicModel } from "../src/worker/models/anthropic.js";
import { messageEnd, messageStart, namedSse as sse } from "./support/anthropic-events.js";
import { type FixedSseServer, startFixedSse } from "./support/fixed-sse-server.js";

let upstream: FixedSseServer;
let url = "";

beforeAll(async () => {
  upstream = await startFixedSse();
  url = `${upstream.url}`;
});
afterAll(() => upstream.close());

const start = messageStart;
const end = messageEnd("tool_use", 20);

function toolBlock(index: number, id: string, args: string) {
  return [
    { type: "content_block_start", index, content_block: { type: "tool_use", id, name: "write", input: {} } },
    { type: "content_block_delta", index, delta: { type: "input_json_delta", partial_json: args } },
    { type: "content_block_stop", index },
  ];
}

async function step(): Promise<AssistantMessage> {
  const model = new AnthropicModel(
    { provider: "anthropic", model: "claude-test", baseUrl: url },
    { apiKey: "k" },
  );
  const result = await callModel(
    model,
    {
      sessionId: "s",
      history: [{ role: "user", content: "go" }],
      tools: [],
      signal: new AbortController().signal,
    },
    { sleep: async () => {} },
  );
  if (!result.ok) throw new Error(result.error);
  return result.message;
}

describe("Anthropic: a content block sent again at its index", () => {
  it("a tool_use block replayed whole at its index is one call", async () => {
    upstream.body = sse([
      start,
      ...toolBlock(0, "toolu_1", '{"f":"a"}'),
      ...toolBlock(0, "toolu_1", '{"f":"a"}'),
      ...end,
    ]);
    const message = await step();
    expect(message.toolCalls).toEqual([{ id: "toolu_1", name: "write", arguments: { f: "a" } }]);
  });

  it("a text block's events replayed after its stop are not its text again", async () => {
    const text = [
      { type: "content_block_start", index: 0, content_block: { type: "text", text: "" } },
      { type: "content_block_delta", index: 0, delta: { type: "text_delta", text: "Writing." } },
      { type: "content_block_stop", index: 0 },
    ];
    upstream.body = sse([start, ...text, ...text, ...toolBlock(1, "toolu_1", '{"f":"a"}'), ...end]);
    const message = await step();
    expect(message.content).toBe("Writing.");
    expect(message.toolCalls).toHaveLength(1);
  });

  it("a stop for an index that never started does not keep its block out", async () => {
    upstream.body = sse([
      start,
      { type: "content_block_stop", index: 0 },
      ...toolBlock(0, "toolu_1", '{"f":"a"}'),
      ...end,
    ]);
    const message = await step();
    expect(message.toolCalls).toEqual([{ id: "toolu_1", name: "write", arguments: { f: "a" } }]);
  });

  it("a tool_use block still open at message_stop makes the step cut, not a whole step without its call", async () => {
    const text = [
      { type: "content_block_start", index: 0, content_block: { type: "text", text: "" } },
      { type: "content_block_delta", index: 0, delta: { type: "text_delta", text: "Writing." } },
      { type: "content_block_stop", index: 0 },
    ];
    upstream.body = sse([start, ...text, ...toolBlock(1, "toolu_1", '{"f":"a"}').slice(0, 2), ...end]);
    const message = await step();
    expect(message).toMatchObject({ content: "Writing.", stopReason: "interrupted" });
    expect(message.toolCalls).toBeUndefined();
  });

  it("a tool_use block still open when max_tokens stopped the model leaves the step max_output, its call not run", async () => {
    const cut = [
      { type: "message_delta", delta: { stop_reason: "max_tokens" }, usage: { output_tokens: 20 } },
      { type: "message_stop" },
    ];
    upstream.body = sse([start, ...toolBlock(0, "toolu_1", '{"f":"a').slice(0, 2), ...cut]);
    const message = await step();
    expect(message.stopReason).toBe("max_output");
    expect(message.toolCalls).toBeUndefined();
  });

  it("a text delta that comes after its block's stop, with no block sent again, is still the step's text", async () => {
    upstream.body = sse([
      start,
      { type: "content_block_start", index: 0, content_block: { type: "text", text: "" } },
      { type: "content_block_delta", index: 0, delta: { type: "text_delta", text: "Writing" } },
      { type: "content_block_stop", index: 0 },
      { type: "content_block_delta", index: 0, delta: { type: "text_delta", text: " now." } },
      ...toolBlock(1, "toolu_1", '{"f":"a"}'),
      ...end,
    ]);
    const message = await step();
    expect(message.content).toBe("Writing now.");
    expect(message.toolCalls).toHaveLength(1);
  });

  it("a stream cut before any output says so once: its error is not prefixed twice, nor a JavaScript error's text", async () => {
    // A message_start without its message: what the server sent cannot be read.
    upstream.body = sse([{ type: "message_start", message: null }]);
    const model = new AnthropicModel(
      { provider: "anthropic", model: "claude-test", baseUrl: url },
      { apiKey: "k" },
    );
    const result = await callModel(
      model,
      {
        sessionId: "s",
        history: [{ role: "user", content: "go" }],
        tools: [],
        signal: new AbortController().signal,
      },
      { sleep: async () => {}, policy: { ...DEFAULT_RETRY_POLICY, maxAttempts: 1 } },
    );
    expect(result.ok).toBe(false);
    const error = result.ok ? "" : result.error;
    expect(error).not.toContain("anthropic: anthropic:");
    expect(error).not.toContain("Cannot read properties");
    expect(error).toContain(
      "anthropic: the stream sent a message_start event that cannot be read (before any output)",
    );
  });
});
