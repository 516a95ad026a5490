/**
 * A `200` with a JSON body to a streamed request (src/worker/models/json-answer.ts): a proxy's
 * `{"error": {...}}`, or a whole answer from a server that does not stream. Read as an event
 * stream with no event, it was "the stream ended before any output", sent again up to the
 * attempt limit (billed each time), the server's words lost. Now the error body is judged like
 * the same error inside a stream, its message kept, and a whole answer is refused at once.
 * Both providers, real SDKs, real HTTP.
 */
import { createServer, type Server } from "node:http";
import type { AddressInfo } from "node:net";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { callModel } from "../src/worker/call-model.js";
import { AnthropicModel } from "../src/worker/models/anthropic.js";
import { OpenAIModel } from "../src/worker/models/openai.js";
import { sayHi } from "./support/model-steps.js";

let server: Server;
let origin = "";
let body = "";
let requests = 0;

beforeAll(async () => {
  server = createServer((req, res) => {
    req.resume();
    req.on("end", () => {
      requests++;
      res.writeHead(200, { "content-type": "application/json; charset=utf-8" });
      res.end(body);
    });
  });
  await new Promise<void>((resolve) => server.listen(0, "127.0.0.1", resolve));
  origin = `http://127.0.0.1:${(server.address() as AddressInfo).port}`;
});
afterAll(async () => {
  server.closeAllConnections();
  await new Promise<void>((resolve) => server.close(() => resolve()));
});

const models = {
  openai: () => new OpenAIModel({ provider: "openai", model: "m", baseUrl: `${origin}/v1` }, { apiKey: "k" }),
  responses: () =>
    new OpenAIModel(
      { provider: "openai", model: "m", baseUrl: `${origin}/v1`, api: "responses" },
      { apiKey: "k" },
    ),
  anthropic: () =>
    new AnthropicModel({ provider: "anthropic", model: "m", baseUrl: origin }, { apiKey: "k" }),
};

async function step(family: keyof typeof models) {
  requests = 0;
  const result = await callModel(models[family](), sayHi(), { sleep: async () => {} });
  return { result, requests };
}

describe.each(Object.keys(models) as (keyof typeof models)[])("%s: a 200 with a JSON body", (family) => {
  it("an error body that refuses the request: its message, one request", async () => {
    body = JSON.stringify({
      error: {
        message: "model 'm' is not served here for sk-live-0123456789abcdef0123",
        type: "invalid_request_error",
      },
    });
    const { result, requests } = await step(family);
    expect(result).toMatchObject({ ok: false, rejected: true, attempts: 1 });
    expect(!result.ok && result.error).toContain("model 'm' is not served here for sk-[redacted]");
    expect(requests).toBe(1);
  });

  it("an error body of a passing kind: retried, its message kept", async () => {
    body = JSON.stringify({ error: { message: "upstream overloaded", type: "overloaded_error" } });
    const { result, requests } = await step(family);
    expect(result).toMatchObject({ ok: false, attempts: 4 });
    expect(result.ok || result.rejected).toBeFalsy();
    expect(!result.ok && result.error).toContain("upstream overloaded");
    expect(requests).toBe(4);
  });

  it("a whole answer from a server that does not stream: refused at once", async () => {
    body = JSON.stringify({ id: "x", object: "chat.completion", choices: [{ message: { content: "hi" } }] });
    const { result, requests } = await step(family);
    expect(result).toMatchObject({ ok: false, rejected: true, attempts: 1 });
    expect(!result.ok && result.error).toContain("not the event stream the request asked for");
    expect(requests).toBe(1);
  });
});
