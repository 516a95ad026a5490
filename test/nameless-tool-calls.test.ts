/**
 * A tool call the model sent without a name cannot be run, answered or sent back (a stored
 * call's `name` is a non-empty string: contracts §1, messages.ts), so every provider drops it,
 * as chat completions and the Responses API always did: the step is stored as a valid message
 * (its export imports again), and its other calls are kept. Before, the Anthropic provider kept
 * a `tool_use` block with `name: ""` as a call: stored as no message may be, answered by a
 * result named "", and replayed to the API as a nameless `tool_use` at every later request.
 * Through the real SDKs and the fake servers.
 */
import { expect, it } from "vitest";
import { assistantMessageSchema } from "../src/shared/messages.js";
import { useFakeProviders } from "./support/fake-providers.js";
import { claudeAt, gpt, step } from "./support/model-steps.js";

const fakes = useFakeProviders();
const history = [{ role: "user" as const, content: "write a" }];

it("Anthropic: a tool_use block without a name is dropped, the named one kept", async () => {
  fakes.anthropic.script({
    blocks: [
      { type: "tool_use", id: "toolu_1", name: "", input: { path: "x" } },
      { type: "tool_use", id: "toolu_2", name: "write_file", input: { path: "a" } },
    ],
    stopReason: "tool_use",
  });
  const message = await step(claudeAt(fakes.anthropic.url, { thinking: undefined }), history);
  expect(assistantMessageSchema.safeParse(message).error?.issues ?? []).toEqual([]);
  expect(message.toolCalls).toEqual([{ id: "toolu_2", name: "write_file", arguments: { path: "a" } }]);
});

it("chat completions: the same answer gives the same step", async () => {
  fakes.chat.enqueue({
    toolCalls: [
      { id: "call_1", name: "", arguments: '{"path":"x"}' },
      { id: "call_2", name: "write_file", arguments: '{"path":"a"}' },
    ],
  });
  const message = await step(gpt("chat", fakes.chat.url), history);
  expect(assistantMessageSchema.safeParse(message).error?.issues ?? []).toEqual([]);
  expect(message.toolCalls).toEqual([{ id: "call_2", name: "write_file", arguments: { path: "a" } }]);
});

/** A value a server sends where the API has a string (JSON allows it; the SDKs do not check). */
const notAString = (value: unknown) => value as string;

it("a call whose id or name is not a string: the name drops the call, the id is replaced", async () => {
  fakes.anthropic.script({
    blocks: [
      { type: "tool_use", id: "toolu_1", name: notAString(7), input: { path: "x" } },
      { type: "tool_use", id: notAString(42), name: "write_file", input: { path: "a" } },
    ],
    stopReason: "tool_use",
  });
  const claude = await step(claudeAt(fakes.anthropic.url, { thinking: undefined }), history);
  expect(claude).toMatchObject({ stopReason: "tool_use" });
  expect(assistantMessageSchema.safeParse(claude).error?.issues ?? []).toEqual([]);
  expect(claude.toolCalls).toEqual([{ id: "call_0", name: "write_file", arguments: { path: "a" } }]);

  fakes.chat.enqueue({
    toolCalls: [
      { id: "call_1", name: notAString(7), arguments: '{"path":"x"}' },
      { id: notAString(42), name: "write_file", arguments: '{"path":"a"}' },
    ],
  });
  const chat = await step(gpt("chat", fakes.chat.url), history);
  expect(chat).toMatchObject({ stopReason: "tool_use" });
  expect(assistantMessageSchema.safeParse(chat).error?.issues ?? []).toEqual([]);
  expect(chat.toolCalls).toHaveLength(1);
  expect(chat.toolCalls?.[0]).toMatchObject({ name: "write_file", arguments: { path: "a" } });
});

it("chat completions: arguments sent as a JSON object rather than its text are kept as that object", async () => {
  fakes.chat.enqueue({
    deltas: [
      {
        tool_calls: [
          {
            index: 0,
            id: "call_1",
            type: "function",
            function: { name: "write_file", arguments: { path: "a" } },
          },
        ],
      },
    ],
    finishReason: "tool_calls",
  });
  const chat = await step(gpt("chat", fakes.chat.url), history);
  expect(chat.toolCalls).toEqual([{ id: "call_1", name: "write_file", arguments: { path: "a" } }]);
});

it("Responses: a function_call item's arguments sent as an object are kept as that object", async () => {
  fakes.responses.script({
    functionCalls: [{ callId: "call_1", name: "write_file", arguments: notAString({ path: "a" }) }],
  });
  const message = await step(gpt("responses", fakes.responses.url), history);
  expect(message.toolCalls).toEqual([{ id: "call_1", name: "write_file", arguments: { path: "a" } }]);
});
