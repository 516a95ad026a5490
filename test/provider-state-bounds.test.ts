/**
 * The output bound (FLEET_MODEL_MAX_OUTPUT_CHARS, call-model.ts `maxOutputChars`) holds for
 * what a step keeps as its provider state (contracts §13) too: Anthropic thinking, signatures
 * and redacted thinking, and Responses reasoning items. They are held in memory while the
 * stream lasts and stored with the step, so a provider that sends 60 MB of them (a signature
 * delta after a signature delta, a redacted block after a redacted block, one reasoning item
 * of 60 MB) must be cut there like 60 MB of text: the step `interrupted`, nothing of the state
 * kept. Through the real SDKs and the fake servers.
 */
import { expect, it } from "vitest";
import type { Message } from "../src/shared/messages.js";
import { callModel } from "../src/worker/call-model.js";
import type { ModelProvider } from "../src/worker/models/provider.js";
import type { FakeBlock } from "./support/fake-anthropic.js";
import { useFakeProviders } from "./support/fake-providers.js";
import { claudeAt, gpt, noSleep, req } from "./support/model-steps.js";

const fakes = useFakeProviders();
const BOUND = 10_000;
const OVER = 30_000;
const history: Message[] = [{ role: "user", content: "hi" }];

/** One step of `model` under BOUND: what it stored, and how many requests it made. */
async function boundedStep(model: ModelProvider) {
  const step = await callModel(model, req(history), {
    sleep: noSleep,
    policy: { maxAttempts: 1, baseDelayMs: 1, maxDelayMs: 1, maxOutputChars: BOUND },
  });
  if (!step.ok) throw new Error(step.error);
  return step.message;
}

const cut = { stopReason: "interrupted" };

it("Anthropic: a redacted thinking block past the bound cuts the step", async () => {
  fakes.anthropic.script({
    blocks: [
      { type: "redacted_thinking", data: "r".repeat(OVER) },
      { type: "text", text: "the answer" },
    ],
  });
  const message = await boundedStep(claudeAt(fakes.anthropic.url));
  expect(message).toMatchObject(cut);
  expect(message.providerState).toBeUndefined();
});

it("Anthropic: a thinking block's signature past the bound cuts the step", async () => {
  fakes.anthropic.script({
    blocks: [
      { type: "thinking", thinking: "hmm", signature: "s".repeat(OVER) },
      { type: "text", text: "the answer" },
    ],
  });
  const message = await boundedStep(claudeAt(fakes.anthropic.url));
  expect(message).toMatchObject(cut);
  expect(message.providerState).toBeUndefined();
});

it("Anthropic: thinking blocks between tool calls count together, not each up to the bound", async () => {
  const blocks: FakeBlock[] = [];
  for (let i = 0; i < 4; i++) {
    blocks.push({ type: "thinking", thinking: "t".repeat(BOUND / 2) });
    blocks.push({ type: "tool_use", id: `call_${i}`, name: "write_file", input: { path: `${i}` } });
  }
  fakes.anthropic.script({ blocks, stopReason: "tool_use" });
  const message = await boundedStep(claudeAt(fakes.anthropic.url));
  expect(message).toMatchObject(cut);
  expect(message.providerState).toBeUndefined();
  expect(message.toolCalls).toBeUndefined();
});

it("Responses: a reasoning item past the bound cuts the step", async () => {
  fakes.responses.script({
    reasoning: true,
    reasoningFields: `"padding":"${"p".repeat(OVER)}"`,
    text: ["the answer"],
  });
  const message = await boundedStep(gpt("responses", fakes.responses.url));
  expect(message).toMatchObject(cut);
  expect(message.providerState).toBeUndefined();
});

it("within the bound, thinking and reasoning are kept as they came", async () => {
  fakes.anthropic.script({
    blocks: [
      { type: "thinking", thinking: "t".repeat(BOUND / 4) },
      { type: "redacted_thinking", data: "r".repeat(BOUND / 4) },
      { type: "text", text: "the answer" },
    ],
  });
  const claude = await boundedStep(claudeAt(fakes.anthropic.url));
  expect(claude).toMatchObject({ content: "the answer", stopReason: "end_turn" });
  expect(claude.providerState?.content).toHaveLength(3);
  fakes.responses.script({ reasoning: true, text: ["the answer"] });
  const openai = await boundedStep(gpt("responses", fakes.responses.url));
  expect(openai).toMatchObject({ content: "the answer", stopReason: "end_turn" });
  expect(openai.providerState?.output).toBeDefined();
});
