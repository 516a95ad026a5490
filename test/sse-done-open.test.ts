/**
 * An OpenAI-compatible server that sends its whole answer, `finish_reason` and `data: [DONE]`,
 * then leaves the response open (a proxy holding the connection, a server that never ends its
 * chunked body): the step is whole at `[DONE]`. The SDK reads on past `[DONE]` until the body
 * ends, so the step waited for the idle limit and was then cut — stored `interrupted`, though
 * every byte of the answer had come — at every retry_response again. Real SDK, real HTTP.
 */
import { createServer, type Server, type ServerResponse } from "node:http";
import type { AddressInfo } from "node:net";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { callModel, DEFAULT_RETRY_POLICY } from "../src/worker/call-model.js";
import { OpenAIModel } from "../src/worker/models/openai.js";
import { sayHi } from "./support/model-steps.js";

let server: Server;
let url = "";
let body = "";
const open: ServerResponse[] = [];

beforeAll(async () => {
  server = createServer((req, res) => {
    req.resume();
    req.on("end", () => {
      res.writeHead(200, { "content-type": "text/event-stream" });
      res.write(body); // and never ended
      open.push(res);
    });
  });
  await new Promise<void>((resolve) => server.listen(0, "127.0.0.1", resolve));
  url = `http://127.0.0.1:${(server.address() as AddressInfo).port}/v1`;
});
afterAll(async () => {
  for (const res of open) res.destroy();
  server.closeAllConnections();
  await new Promise<void>((resolve) => server.close(() => resolve()));
});

const chunk = (delta: unknown, finish: string | null = null) =>
  `data: ${JSON.stringify({ id: "c", object: "chat.completion.chunk", choices: [{ index: 0, delta, finish_reason: finish }] })}\n\n`;

describe("chat completions: a response left open after [DONE]", () => {
  it("is a whole step at [DONE], not one cut by the idle limit", async () => {
    body =
      chunk({ content: "Hello" }) +
      chunk({}, "stop") +
      `data: ${JSON.stringify({ id: "c", object: "chat.completion.chunk", choices: [], usage: { prompt_tokens: 3, completion_tokens: 1 } })}\n\n` +
      "data: [DONE]\n\n";
    const model = new OpenAIModel({ provider: "openai", model: "m", baseUrl: url }, { apiKey: "k" });
    const result = await callModel(
      model,
      sayHi(),
      // A short idle limit, so that the step cut there (before the fix) is seen soon.
      { sleep: async () => {}, policy: { ...DEFAULT_RETRY_POLICY, idleTimeoutMs: 1_000 } },
    );
    expect(result.ok && result.message).toMatchObject({
      content: "Hello",
      stopReason: "end_turn",
      usage: { inputTokens: 3, outputTokens: 1 },
    });
  });

  it("text after [DONE] on the same read is not taken into the step", async () => {
    body = `${chunk({ content: "Hello" })}${chunk({}, "stop")}data: [DONE]\n\n${chunk({ content: " again" })}`;
    const model = new OpenAIModel({ provider: "openai", model: "m", baseUrl: url }, { apiKey: "k" });
    const result = await callModel(model, sayHi(), {
      sleep: async () => {},
      policy: { ...DEFAULT_RETRY_POLICY, idleTimeoutMs: 1_000 },
    });
    expect(result.ok && result.message).toMatchObject({ content: "Hello", stopReason: "end_turn" });
  });
});
