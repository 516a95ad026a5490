/**
 * Two `200` answers to a streamed request that no retry can make right, both providers, real
 * SDKs, a local server that counts the requests:
 *
 * - a body of another content type than an event stream (`text/plain`: a proxy's message, a
 *   server that does not stream). The SDKs read whatever came as an event stream: text with no
 *   event was "the stream ended before any output" and asked again up to the attempt limit,
 *   and text that happened to hold `data:` lines was taken as the model's answer;
 * - response headers past what the worker's HTTP client reads (16 KiB: a proxy adding huge
 *   cookies). undici refuses them, the SDK called it a connection error, and it was asked
 *   again up to the attempt limit — the same headers each time.
 *
 * Each is now refused after one request, like a web page or a JSON body (page-answer.ts,
 * json-answer.ts), saying what came.
 */
import { afterAll, beforeAll, beforeEach, describe, expect, it } from "vitest";
import { callModel } from "../src/worker/call-model.js";
import { AnthropicModel } from "../src/worker/models/anthropic.js";
import { OpenAIModel } from "../src/worker/models/openai.js";
import { type FixedSseServer, startFixedSse } from "./support/fixed-sse-server.js";
import { sayHi } from "./support/model-steps.js";

let server: FixedSseServer;

beforeAll(async () => {
  server = await startFixedSse();
});
afterAll(() => server.close());
beforeEach(() => {
  server.requests = 0;
  server.headers = {};
  server.contentType = "text/event-stream";
  server.body = "";
});

const models = {
  openai: () => new OpenAIModel({ provider: "openai", model: "m", baseUrl: server.url }, { apiKey: "k" }),
  responses: () =>
    new OpenAIModel(
      { provider: "openai", model: "m", baseUrl: server.url, api: "responses" },
      { apiKey: "k" },
    ),
  anthropic: () =>
    new AnthropicModel({ provider: "anthropic", model: "m", baseUrl: server.url }, { apiKey: "k" }),
};

describe.each(Object.keys(models) as (keyof typeof models)[])("%s", (family) => {
  it("a 200 of text/plain is refused at once, saying what came", async () => {
    server.contentType = "text/plain; charset=utf-8";
    server.body = "upstream is warming up, try later\n";
    const result = await callModel(models[family](), sayHi(), { sleep: async () => {} });
    expect(result).toMatchObject({ ok: false, rejected: true, attempts: 1 });
    expect(!result.ok && result.error).toContain("text/plain");
    expect(!result.ok && result.error).toContain("upstream is warming up");
    expect(server.requests).toBe(1);
  });

  it("response headers too large to read are refused at once, not retried", async () => {
    server.headers = { "x-padding": "a".repeat(40_000) };
    const result = await callModel(models[family](), sayHi(), { sleep: async () => {} });
    expect(result).toMatchObject({ ok: false, rejected: true, attempts: 1 });
    expect(!result.ok && result.error).toContain("headers");
    expect(server.requests).toBe(1);
  });
});
