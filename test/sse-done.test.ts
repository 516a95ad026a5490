/**
 * sse-done.ts: recognising the terminal `data: [DONE]` of an OpenAI-compatible SSE body
 * while passing the bytes through unchanged, however the body is split into chunks.
 */
import { describe, expect, it } from "vitest";
import { watchForDone } from "../src/worker/models/sse-done.js";

/** A response whose body arrives in the given chunks. */
function responseOf(chunks: string[]): Response {
  const encoder = new TextEncoder();
  const body = new ReadableStream<Uint8Array>({
    start(controller) {
      for (const chunk of chunks) controller.enqueue(encoder.encode(chunk));
      controller.close();
    },
  });
  return new Response(body, { status: 200, headers: { "content-type": "text/event-stream" } });
}

async function consume(chunks: string[]): Promise<{ text: string; done: boolean; status: number }> {
  const watch = watchForDone(responseOf(chunks));
  const text = await watch.response.text();
  return { text, done: watch.sawDone(), status: watch.response.status };
}

const CHUNK = 'data: {"choices":[{"delta":{"content":"hi"},"finish_reason":"stop"}]}\n\n';

describe("watchForDone", () => {
  it("sees `data: [DONE]` and passes every byte through unchanged", async () => {
    const chunks = [CHUNK, "data: [DONE]\n\n"];
    expect(await consume(chunks)).toEqual({ text: chunks.join(""), done: true, status: 200 });
  });

  it("sees [DONE] split across chunks, without the space, or with CRLF line ends", async () => {
    expect((await consume([CHUNK, "da", "ta: [DO", "NE]", "\n\n"])).done).toBe(true);
    expect((await consume([CHUNK, "data:[DONE]\n\n"])).done).toBe(true);
    expect((await consume([CHUNK.replaceAll("\n", "\r\n"), "data: [DONE]\r\n\r\n"])).done).toBe(true);
    expect((await consume([CHUNK, "data: [DONE]"])).done).toBe(true); // last line, no newline
  });

  it("does not see [DONE] in a body without it, nor inside a chunk's JSON", async () => {
    expect((await consume([CHUNK])).done).toBe(false);
    expect((await consume(['data: {"content":"data: [DONE]"}\n\n'])).done).toBe(false);
    expect((await consume([": data: [DONE]\n\n"])).done).toBe(false);
    expect((await consume(["data: [DON"])).done).toBe(false);
  });

  it("is false until the [DONE] line has passed", async () => {
    const watch = watchForDone(responseOf([CHUNK, "data: [DONE]\n\n"]));
    expect(watch.sawDone()).toBe(false);
    await watch.response.text();
    expect(watch.sawDone()).toBe(true);
  });
});
