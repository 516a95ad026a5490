/**
 * A Messages API stream whose events come as `data:` lines only, without their `event:` lines
 * (proxies and gateways in front of Anthropic that forward the data and drop the names): the
 * event's name is the `type` its data carries. The SDK's stream reader skips every event
 * without a name, so such a stream read as empty — "ended before message_stop" — and the step
 * was asked again until the attempts ran out, each one answered (and billed) in full. Real
 * SDK, real HTTP: a local server writes the stream as given and counts the requests.
 */
import { afterAll, beforeAll, beforeEach, expect, it } from "vitest";
import { callModel, DEFAULT_RETRY_POLICY, type ModelStep } from "../src/worker/call-model.js";
import { AnthropicModel } from "../src/worker/models/anthropic.js";
import {
  dataOnlySse as dataOnly,
  messageEnd,
  messageStart,
  namedSse as named,
} from "./support/anthropic-events.js";
import { type FixedSseServer, startFixedSse } from "./support/fixed-sse-server.js";
import { sayHi } from "./support/model-steps.js";

let upstream: FixedSseServer;

beforeAll(async () => {
  upstream = await startFixedSse();
});
afterAll(() => upstream.close());
beforeEach(() => {
  upstream.requests = 0;
});

const start = messageStart;
const text = [
  { type: "content_block_start", index: 0, content_block: { type: "text", text: "" } },
  { type: "content_block_delta", index: 0, delta: { type: "text_delta", text: "Hello" } },
  { type: "content_block_stop", index: 0 },
];
const end = messageEnd("end_turn", 5);

function step(): Promise<ModelStep> {
  const model = new AnthropicModel(
    { provider: "anthropic", model: "claude-test", baseUrl: upstream.url },
    { apiKey: "k" },
  );
  return callModel(model, sayHi(), { sleep: async () => {}, policy: DEFAULT_RETRY_POLICY });
}

it("a stream of data lines only is read, asked once", async () => {
  upstream.body = dataOnly([start, { type: "ping" }, ...text, ...end]);
  const result = await step();
  expect(result).toMatchObject({
    ok: true,
    attempts: 1,
    message: { content: "Hello", stopReason: "end_turn", usage: { inputTokens: 10, outputTokens: 5 } },
  });
  expect(upstream.requests).toBe(1);
});

it("an error event without its name is the provider's error: a refusal is not asked again", async () => {
  upstream.body = dataOnly([
    start,
    { type: "error", error: { type: "permission_error", message: "not for this key" } },
  ]);
  const result = await step();
  expect(result).toMatchObject({ ok: false, rejected: true });
  expect(result.ok ? "" : result.error).toContain("permission_error: not for this key");
  expect(upstream.requests).toBe(1);
});

it("named events read as before; a data line without a type beside them is skipped", async () => {
  upstream.body = `${named([start])}data: [DONE]\n\ndata: {"no":"type"}\n\n${named([...text, ...end])}`;
  const result = await step();
  expect(result).toMatchObject({ ok: true, attempts: 1, message: { content: "Hello" } });
  expect(upstream.requests).toBe(1);
});
