/**
 * A step cut short after output (`interrupted`) has no usage of its own (contracts §13), and
 * `agent.budget.maxTokens` counts an estimate of it instead (README "Token usage"). What the
 * provider reported before the cut — Anthropic's `message_start` (the request's input
 * tokens, cache reads and writes included), OpenAI's usage chunk before `[DONE]` — is what
 * it bills: the budget counts at least that, where before an estimate from the history's
 * bytes could count far less (a cached prompt of 90,000 tokens sent as a short history).
 */
import { describe, expect, it } from "vitest";
import { callModel } from "../src/worker/call-model.js";
import { OpenAIModel } from "../src/worker/models/openai.js";
import { useFakeProviders } from "./support/fake-providers.js";
import { claudeAt, noSleep, req } from "./support/model-steps.js";

const fakes = useFakeProviders();
const ONE_ATTEMPT = { sleep: noSleep, policy: { maxAttempts: 1, baseDelayMs: 1, maxDelayMs: 1 } };

describe("a step cut after the provider reported usage", () => {
  it("anthropic: cut after message_start and some text, the budget counts the input it reported", async () => {
    fakes.anthropic.script({
      blocks: [
        {
          type: "text",
          text: "Partial answer that goes on",
          chunks: ["Partial ", "answer ", "that goes on"],
        },
      ],
      usage: { input_tokens: 1000, output_tokens: 500, cache_read_input_tokens: 89_000 },
      // message_start, content_block_start, two deltas: then the connection breaks.
      cutAfterEvents: 4,
    });
    const step = await callModel(
      claudeAt(fakes.anthropic.url, { thinking: undefined }),
      req([{ role: "user", content: "hi" }]),
      ONE_ATTEMPT,
    );
    expect(step.ok && step.message).toMatchObject({ stopReason: "interrupted", content: "Partial answer " });
    if (!step.ok) throw new Error(step.error);
    expect(step.message.usage ?? null).toBeNull();
    expect(step.estimatedUsage?.inputTokens).toBeGreaterThanOrEqual(90_000);
  });

  it("openai chat: cut after the usage chunk, before [DONE], the budget counts what it reported", async () => {
    fakes.chat.enqueue({
      text: ["Partial ", "answer."],
      usage: { prompt_tokens: 90_000, completion_tokens: 5_000 },
      omitDone: true,
    });
    const model = new OpenAIModel(
      { provider: "openai", model: "gpt-test", baseUrl: fakes.chat.url },
      { keyless: true },
    );
    const step = await callModel(model, req([{ role: "user", content: "hi" }]), ONE_ATTEMPT);
    if (!step.ok) throw new Error(step.error);
    expect(step.message).toMatchObject({ stopReason: "interrupted", content: "Partial answer." });
    expect(step.estimatedUsage?.inputTokens).toBeGreaterThanOrEqual(90_000);
    expect(step.estimatedUsage?.outputTokens).toBeGreaterThanOrEqual(5_000);
  });

  it("a cut with nothing reported still counts the estimate", async () => {
    fakes.chat.enqueue({ text: ["Partial ", "answer."], cutAfter: 1 });
    const model = new OpenAIModel(
      { provider: "openai", model: "gpt-test", baseUrl: fakes.chat.url },
      { keyless: true },
    );
    const step = await callModel(model, req([{ role: "user", content: "hi" }]), ONE_ATTEMPT);
    if (!step.ok) throw new Error(step.error);
    expect(step.message.stopReason).toBe("interrupted");
    expect(step.estimatedUsage?.inputTokens).toBeGreaterThan(0);
    expect(step.estimatedUsage?.inputTokens).toBeLessThan(1000);
  });
});
