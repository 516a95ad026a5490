/**
 * A provider body that sends one very long line (a broken or hostile OpenAI-compatible
 * server: its whole answer as a single `data:` line with no end). The SDKs split lines in
 * time quadratic in a line's length, so before, a 40 MB line kept the worker's CPU busy for
 * the whole idle limit and the step failed as "the model sent nothing" (then asked again);
 * 10 MB took 17 s. Now the body reaches the SDK in whole lines (sse-lines.ts), and a line
 * past 64 MiB fails the request at once, not retried. Real HTTP server, the real SDK.
 */
import { createServer, type ServerResponse } from "node:http";
import type { AddressInfo } from "node:net";
import { afterEach, describe, expect, it } from "vitest";
import { callModel } from "../src/worker/call-model.js";
import { OpenAIModel, type OpenAIModelConfig } from "../src/worker/models/openai.js";
import { MAX_LINE_BYTES } from "../src/worker/models/sse-lines.js";

const closers: (() => Promise<void>)[] = [];
afterEach(async () => {
  for (const close of closers.splice(0)) await close();
});

/** Writes `data`, resolving once written or once the client has gone. */
function write(res: ServerResponse, data: string): Promise<void> {
  return new Promise<void>((resolve) => {
    if (res.destroyed) return resolve();
    res.once("close", resolve);
    res.write(data, () => {
      res.off("close", resolve);
      resolve();
    });
  });
}

/** A server answering every request with `head`, then `bytes` of "a" (no line end), then `tail`. */
async function longLineServer(head: string, bytes: number, tail: string): Promise<string> {
  const server = createServer(async (req, res) => {
    for await (const _ of req);
    res.writeHead(200, { "content-type": "text/event-stream" });
    await write(res, head);
    const piece = "a".repeat(1 << 16);
    for (let sent = 0; sent < bytes && !res.destroyed; sent += piece.length) await write(res, piece);
    if (!res.destroyed) res.end(tail);
  });
  await new Promise<void>((resolve) => server.listen(0, "127.0.0.1", resolve));
  closers.push(
    () =>
      new Promise<void>((resolve) => {
        server.closeAllConnections();
        server.close(() => resolve());
      }),
  );
  return `http://127.0.0.1:${(server.address() as AddressInfo).port}/v1`;
}

async function step(url: string, config: Partial<OpenAIModelConfig> = {}) {
  const model = new OpenAIModel(
    { provider: "openai", model: "m", baseUrl: url, ...config },
    { keyless: true },
  );
  return callModel(
    model,
    {
      sessionId: "s1",
      history: [{ role: "user", content: "hi" }],
      tools: [],
      signal: new AbortController().signal,
    },
    {
      sleep: async () => {},
      policy: { maxAttempts: 4, baseDelayMs: 1, maxDelayMs: 1, idleTimeoutMs: 15_000, maxStepMs: 600_000 },
    },
  );
}

describe("a provider body with one very long line", () => {
  it("chat: a line past the bound fails the request at once, not retried, naming the cause", async () => {
    const url = await longLineServer(
      'data: {"id":"x","object":"chat.completion.chunk","created":0,"model":"m","choices":[{"index":0,"delta":{"content":"',
      MAX_LINE_BYTES + (4 << 20),
      '"},"finish_reason":"stop"}]}\n\ndata: [DONE]\n\n',
    );
    const result = await step(url);
    expect(result).toMatchObject({ ok: false, attempts: 1, rejected: true });
    expect(result.ok ? "" : result.error).toMatch(/a line longer than 67108864 bytes/);
  });

  it("responses: the same", async () => {
    const url = await longLineServer(
      'event: response.output_text.delta\ndata: {"type":"response.output_text.delta","delta":"',
      MAX_LINE_BYTES + (4 << 20),
      '"}\n\n',
    );
    const result = await step(url, { api: "responses" });
    expect(result).toMatchObject({ ok: false, attempts: 1, rejected: true });
    expect(result.ok ? "" : result.error).toMatch(/a line longer than 67108864 bytes/);
  });
});
