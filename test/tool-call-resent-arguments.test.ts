/**
 * OpenAI-compatible servers that send a tool call's whole arguments again at the end of the
 * stream, after streaming them piece by piece: vLLM's end-of-stream flush does it under some
 * tool parsers (xlam; GLM's final chunk, which carries the whole arguments beside
 * `finish_reason`), so the pieces joined read `{"path": "a.txt", …}{"path": "a.txt", …}`, or
 * `{{"path": …}` when only the opening brace had been streamed. Joined, that is no JSON: the
 * call was stored with `{"_raw": …}` and its tool refused it, at every call of every step, so
 * no agent could use a tool through such a server. Now, when the pieces joined do not parse
 * but the last piece alone is a whole JSON object, that object (the server's whole arguments)
 * is the call's. Arguments the model itself wrote wrong stay `_raw`, as before.
 * Real SDK against the local fake OpenAI-compatible server.
 */
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { callModel } from "../src/worker/call-model.js";
import { OpenAIModel } from "../src/worker/models/openai.js";
import { type FakeOpenAI, startFakeOpenAI } from "./support/fake-openai.js";
import { req } from "./support/model-steps.js";

let fake: FakeOpenAI;
beforeAll(async () => {
  fake = await startFakeOpenAI();
});
afterAll(() => fake.close());

const WHOLE = '{"path": "a.txt", "content": "hi"}';

async function callsOf() {
  const model = new OpenAIModel({ provider: "openai", model: "m", baseUrl: fake.url }, { keyless: true });
  const result = await callModel(model, req([{ role: "user", content: "write a.txt" }]), {
    sleep: async () => {},
    policy: { maxAttempts: 1, baseDelayMs: 1, maxDelayMs: 1 },
  });
  if (!result.ok) throw new Error(result.error);
  return result.message.toolCalls;
}

/** The whole arguments sent once more as one last fragment of call 0. */
const resent = (args: string) => ({ tool_calls: [{ index: 0, function: { arguments: args } }] });

describe("a tool call whose whole arguments come again at the end", () => {
  it("streamed in pieces, then sent whole: the call gets the arguments once", async () => {
    fake.enqueue({
      toolCalls: [{ id: "call_1", name: "write_file", arguments: WHOLE, fragments: 4 }],
      deltas: [resent(WHOLE)],
    });
    expect(await callsOf()).toEqual([
      { id: "call_1", name: "write_file", arguments: { path: "a.txt", content: "hi" } },
    ]);
  });

  it("only its opening brace streamed, then sent whole", async () => {
    fake.enqueue({
      toolCalls: [{ id: "call_2", name: "write_file", arguments: "{", fragments: 1 }],
      deltas: [resent(WHOLE)],
    });
    expect(await callsOf()).toEqual([
      { id: "call_2", name: "write_file", arguments: { path: "a.txt", content: "hi" } },
    ]);
  });

  it("arguments the model wrote wrong are kept as they came (_raw)", async () => {
    fake.enqueue({
      toolCalls: [
        { id: "call_3", name: "write_file", arguments: '{"path": "a.txt", "content": hi}', fragments: 3 },
      ],
    });
    expect(await callsOf()).toEqual([
      { id: "call_3", name: "write_file", arguments: { _raw: '{"path": "a.txt", "content": hi}' } },
    ]);
  });

  it("two calls: each keeps its own arguments", async () => {
    const other = '{"path": "b.txt", "content": "ho"}';
    fake.enqueue({
      toolCalls: [
        { id: "call_4", name: "write_file", arguments: WHOLE, fragments: 2 },
        { id: "call_5", name: "write_file", arguments: other, fragments: 2 },
      ],
      deltas: [resent(WHOLE), { tool_calls: [{ index: 1, function: { arguments: other } }] }],
    });
    expect(await callsOf()).toEqual([
      { id: "call_4", name: "write_file", arguments: { path: "a.txt", content: "hi" } },
      { id: "call_5", name: "write_file", arguments: { path: "b.txt", content: "ho" } },
    ]);
  });

  it("two whole calls a server sent at one index, without ids: both kept as they came, none dropped", async () => {
    fake.enqueue({
      deltas: [
        {
          tool_calls: [
            { index: 0, type: "function", function: { name: "write_file", arguments: '{"path":"a"}' } },
          ],
        },
        {
          tool_calls: [
            { index: 0, type: "function", function: { name: "write_file", arguments: '{"path":"b"}' } },
          ],
        },
      ],
      finishReason: "tool_calls",
    });
    const calls = await callsOf();
    expect(calls?.map((call) => call.arguments)).toEqual([{ _raw: '{"path":"a"}{"path":"b"}' }]);
  });
});
