/**
 * A tool call is yielded whole only once the response has finished (openai-tool-calls.ts), but
 * its name and arguments stream in before that, fragment by fragment. Before, those fragments
 * were invisible to callModel: a model writing a long file through `write_file` for longer
 * than `idleTimeoutMs` was cut as "the model sent nothing", although it sent all along, and
 * retried (the same long call, paid again, cut again); and the fragments piled up in memory
 * unbounded (FLEET_MODEL_MAX_OUTPUT_CHARS was checked only once the call was whole), so a
 * server streaming hundreds of MB of arguments was read to its end. Now each fragment is
 * `progress`: it keeps the stream alive, and counts toward the output bound as it arrives.
 * Real HTTP servers speaking the chat-completions SSE protocol, the real SDK.
 */
import { createServer } from "node:http";
import type { AddressInfo } from "node:net";
import { afterEach, describe, expect, it } from "vitest";
import { callModel } from "../src/worker/call-model.js";
import { OpenAIModel } from "../src/worker/models/openai.js";
import type { ModelRequest } from "../src/worker/models/provider.js";
import { type FakeOpenAI, startFakeOpenAI } from "./support/fake-openai.js";

const closers: (() => Promise<void>)[] = [];
afterEach(async () => {
  for (const close of closers.splice(0)) await close();
});

function request(): ModelRequest {
  return {
    sessionId: "s1",
    history: [{ role: "user", content: "write it" }],
    tools: [],
    signal: new AbortController().signal,
  };
}

const model = (url: string) =>
  new OpenAIModel({ provider: "openai", model: "gpt-test", baseUrl: url }, { keyless: true });

const noSleep = { sleep: async () => {} };

describe("a tool call streamed in fragments", () => {
  it("arguments streaming steadily for longer than the idle limit are not an idle stream", async () => {
    const fake: FakeOpenAI = await startFakeOpenAI();
    closers.push(() => fake.close());
    const content = "x".repeat(600);
    fake.enqueue({
      toolCalls: [
        { id: "c1", name: "write_file", arguments: JSON.stringify({ path: "a", content }), fragments: 60 },
      ],
      chunkDelayMs: 40,
    });
    const step = await callModel(model(fake.url), request(), {
      ...noSleep,
      policy: { maxAttempts: 1, baseDelayMs: 1, maxDelayMs: 1, idleTimeoutMs: 1_000, maxStepMs: 60_000 },
    });
    expect(step).toMatchObject({
      ok: true,
      attempts: 1,
      message: {
        stopReason: "tool_use",
        toolCalls: [{ id: "c1", name: "write_file", arguments: { path: "a", content } }],
      },
    });
  });

  it("arguments past FLEET_MODEL_MAX_OUTPUT_CHARS are cut as they arrive, not read to their end", async () => {
    const TOTAL_FRAGMENTS = 50_000; // 50 MB of arguments, 1 KB a fragment
    const piece = "y".repeat(1024);
    let written = 0;
    let served!: () => void;
    const answered = new Promise<void>((resolve) => {
      served = resolve;
    });
    const server = createServer(async (req, res) => {
      for await (const _ of req);
      res.writeHead(200, { "content-type": "text/event-stream" });
      const chunk = (delta: unknown, finish: string | null = null) =>
        `data: ${JSON.stringify({ id: "x", object: "chat.completion.chunk", created: 0, model: "m", choices: [{ index: 0, delta, finish_reason: finish }] })}\n\n`;
      // A write left pending when the client goes away is never called back: the close ends it.
      const write = (data: string) =>
        new Promise<void>((resolve) => {
          if (res.destroyed) return resolve();
          res.once("close", resolve);
          res.write(data, () => {
            res.off("close", resolve);
            resolve();
          });
        });
      await write(
        chunk({
          tool_calls: [
            {
              index: 0,
              id: "c1",
              type: "function",
              function: { name: "write_file", arguments: '{"content":"' },
            },
          ],
        }),
      );
      for (; written < TOTAL_FRAGMENTS && !res.destroyed; written++)
        await write(chunk({ tool_calls: [{ index: 0, function: { arguments: piece } }] }));
      served();
      if (res.destroyed) return;
      await write(chunk({ tool_calls: [{ index: 0, function: { arguments: '"}' } }] }));
      await write(chunk({}, "tool_calls"));
      await write("data: [DONE]\n\n");
      res.end();
    });
    await new Promise<void>((resolve) => server.listen(0, "127.0.0.1", resolve));
    closers.push(
      () =>
        new Promise<void>((resolve) => {
          server.closeAllConnections();
          server.close(() => resolve());
        }),
    );
    const url = `http://127.0.0.1:${(server.address() as AddressInfo).port}/v1`;
    const step = await callModel(model(url), request(), {
      ...noSleep,
      policy: {
        maxAttempts: 1,
        baseDelayMs: 1,
        maxDelayMs: 1,
        idleTimeoutMs: 120_000,
        maxStepMs: 600_000,
        maxOutputChars: 100_000,
      },
    });
    expect(step).toMatchObject({
      ok: true,
      attempts: 1,
      message: { content: "", stopReason: "interrupted" },
    });
    // The client left once past the bound: the server never got to write the 50 MB.
    await answered;
    expect(written).toBeLessThan(TOTAL_FRAGMENTS / 2);
  });
});

describe("reasoning streamed before the answer (an OpenAI-compatible reasoning model)", () => {
  it("reasoning_content / reasoning deltas for longer than the idle limit are not an idle stream", async () => {
    // vLLM's and DeepSeek's reasoning parsers stream the model's thinking as
    // `delta.reasoning_content` (Ollama and others as `delta.reasoning`) for minutes before
    // the first `content`: before, the step was cut as "the model sent nothing" and asked again.
    const fake: FakeOpenAI = await startFakeOpenAI();
    closers.push(() => fake.close());
    const thinking = Array.from({ length: 60 }, (_, i) =>
      i % 2 === 0 ? { reasoning_content: "hmm " } : { reasoning: "hmm " },
    );
    fake.enqueue({ deltas: [...thinking, { content: "42" }], chunkDelayMs: 40 });
    const step = await callModel(model(fake.url), request(), {
      ...noSleep,
      policy: { maxAttempts: 1, baseDelayMs: 1, maxDelayMs: 1, idleTimeoutMs: 1_000, maxStepMs: 60_000 },
    });
    expect(step).toMatchObject({ ok: true, attempts: 1, message: { content: "42", stopReason: "end_turn" } });
  });
});
