/**
 * A Messages API or Responses API stream whose text is not a string (a hostile or broken
 * server: `"text": 123`, an object, a list of strings). The readers took any truthy text: a
 * number was stored as its digits, an object as "[object Object]", a list as its elements
 * joined by commas — counted against the output bound (FLEET_MODEL_MAX_OUTPUT_CHARS) by its
 * number of elements, not its characters. Text is a string or nothing, as the chat
 * completions reader takes it. Real SDKs, real HTTP.
 */
import { afterAll, beforeAll, expect, it } from "vitest";
import { callModel } from "../src/worker/call-model.js";
import { AnthropicModel } from "../src/worker/models/anthropic.js";
import { OpenAIModel } from "../src/worker/models/openai.js";
import { messageEnd, messageStart, namedSse as sse } from "./support/anthropic-events.js";
import { type FixedSseServer, startFixedSse } from "./support/fixed-sse-server.js";
import { sayHi } from "./support/model-steps.js";

let upstream: FixedSseServer;

beforeAll(async () => {
  upstream = await startFixedSse();
});
afterAll(() => upstream.close());

const delta = (text: unknown) => ({
  type: "content_block_delta",
  index: 0,
  delta: { type: "text_delta", text },
});

it("text that is not a string is not text: neither stored nor counted as characters it is not", async () => {
  upstream.body = sse([
    messageStart,
    { type: "content_block_start", index: 0, content_block: { type: "text", text: 7 } },
    delta("Hello"),
    delta(123),
    delta({ a: 1 }),
    delta(["x".repeat(50), "y".repeat(50)]),
    delta(" world"),
    { type: "content_block_stop", index: 0 },
    ...messageEnd("end_turn", 5),
  ]);
  const model = new AnthropicModel(
    { provider: "anthropic", model: "m", baseUrl: upstream.url },
    { apiKey: "k" },
  );
  const result = await callModel(model, sayHi(), {
    sleep: async () => {},
    policy: { maxAttempts: 1, baseDelayMs: 1, maxDelayMs: 1, maxOutputChars: 60 },
  });
  expect(result).toMatchObject({ ok: true, message: { content: "Hello world", stopReason: "end_turn" } });
});

it("Responses: a text delta that is not a string is not text", async () => {
  const text = (delta: unknown) => ({
    type: "response.output_text.delta",
    output_index: 0,
    content_index: 0,
    delta,
  });
  upstream.body = sse([
    text("Hello"),
    text(123),
    text(["x".repeat(50), "y".repeat(50)]),
    { type: "response.refusal.delta", output_index: 0, content_index: 0, delta: { a: 1 } },
    text(" world"),
    {
      type: "response.completed",
      response: { id: "r", status: "completed", output: [], usage: { input_tokens: 3, output_tokens: 5 } },
    },
  ]);
  const model = new OpenAIModel(
    { provider: "openai", model: "m", baseUrl: `${upstream.url}/v1`, api: "responses" },
    { apiKey: "k" },
  );
  const result = await callModel(model, sayHi(), {
    sleep: async () => {},
    policy: { maxAttempts: 1, baseDelayMs: 1, maxDelayMs: 1, maxOutputChars: 60 },
  });
  expect(result).toMatchObject({ ok: true, message: { content: "Hello world", stopReason: "end_turn" } });
});
