/**
 * A provider body whose event never ends: `data:` lines, each of them short enough, that never
 * reach the blank line closing an event (a broken or hostile server, a proxy gone wrong). Both
 * SDKs keep every line of an event until its blank line: the Anthropic SDK held them all (1.2 GB
 * of RSS after 25 s of one request, growing until the step's 10-minute limit, past the memory
 * of most workers), and the OpenAI SDK copies and scans the event's bytes again from their start
 * at every chunk, so its CPU was busy for the whole step on a few MB a second. Now an event is
 * handed on whole once it passes 1 MiB (sse-lines.ts), and one past 64 MiB fails the request at
 * once, not retried: the same server would send the same again. Real HTTP server, real SDKs.
 */
import { createServer } from "node:http";
import type { AddressInfo } from "node:net";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { callModel } from "../src/worker/call-model.js";
import { OpenAIModel } from "../src/worker/models/openai.js";
import { everyFamilyAt, sayHi } from "./support/model-steps.js";

/** Bytes of the current answer the server wrote. */
let sent = 0;
let url = "";
let close: () => Promise<void>;

beforeAll(async () => {
  const line = Buffer.from(`data: ${"x".repeat(64 * 1024)}\n`);
  const server = createServer((req, res) => {
    req.resume();
    sent = 0;
    res.writeHead(200, { "content-type": "text/event-stream" });
    // Lines for ever, never a blank one, as fast as the client reads.
    const pump = () => {
      while (!res.destroyed) {
        sent += line.length;
        if (!res.write(line)) return void res.once("drain", pump);
      }
    };
    pump();
  });
  await new Promise<void>((resolve) => server.listen(0, "127.0.0.1", resolve));
  url = `http://127.0.0.1:${(server.address() as AddressInfo).port}`;
  close = () => {
    server.closeAllConnections();
    return new Promise<void>((resolve) => server.close(() => resolve()));
  };
});
afterAll(() => close());

const models = everyFamilyAt(() => url);

describe.each(Object.keys(models) as (keyof typeof models)[])("%s: an event that never ends", (family) => {
  it("fails the request once the event passes 64 MiB, not retried", async () => {
    const abort = new AbortController();
    const call = callModel(
      models[family](),
      { ...sayHi(), signal: abort.signal },
      { sleep: async () => {}, policy: { maxAttempts: 4, baseDelayMs: 1, maxDelayMs: 1 } },
    );
    try {
      const settled = await Promise.race([
        call.then(() => true),
        new Promise((r) => setTimeout(r, 15_000, false)),
      ]);
      expect(settled, `the call did not end within 15 s; the server sent ${sent >> 20} MB of one event`).toBe(
        true,
      );
      const result = await call;
      expect(result).toMatchObject({ ok: false, attempts: 1, rejected: true });
      expect(result.ok ? "" : result.error).toMatch(/an event longer than 67108864 bytes/);
      expect(sent).toBeLessThan(100 * 1024 * 1024);
    } finally {
      abort.abort();
      await call.catch(() => {});
    }
  }, 30_000);
});

describe("a large event of many lines that does end", () => {
  it("is read whole (chat: a 2 MiB event in 64 KiB lines)", async () => {
    const pad = "y".repeat(64 * 1024);
    const lines = Array.from({ length: 32 }, (_, i) => `data: "pad${i}": "${pad}",\n`).join("");
    const body = `data: {\n${lines}data: "choices":[{"index":0,"delta":{"content":"whole"},"finish_reason":"stop"}]}\n\ndata: [DONE]\n\n`;
    const server = createServer((req, res) => {
      req.resume();
      res.writeHead(200, { "content-type": "text/event-stream" });
      // In pieces of 64 KiB, as a network delivers it.
      for (let i = 0; i < body.length; i += 65_536) res.write(body.slice(i, i + 65_536));
      res.end();
    });
    await new Promise<void>((resolve) => server.listen(0, "127.0.0.1", resolve));
    try {
      const model = new OpenAIModel(
        {
          provider: "openai",
          model: "m",
          baseUrl: `http://127.0.0.1:${(server.address() as AddressInfo).port}/v1`,
        },
        { keyless: true },
      );
      const result = await callModel(model, sayHi(), {
        sleep: async () => {},
        policy: { maxAttempts: 1, baseDelayMs: 1, maxDelayMs: 1 },
      });
      expect(result).toMatchObject({ ok: true, message: { content: "whole", stopReason: "end_turn" } });
    } finally {
      server.closeAllConnections();
      await new Promise<void>((resolve) => server.close(() => resolve()));
    }
  });
});
