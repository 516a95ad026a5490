/**
 * The Responses API's `response.failed` carries the response's `usage`: what the failed
 * response was billed. It counts like any report before a failure (README "Budget"): added to
 * the step a retry stores, or, cut after output, to that step's estimate. Before, the reader
 * threw on `response.failed` without reporting it, and its tokens were lost.
 * `response.incomplete` ends the step whole, its usage stored as the step's (checked here too).
 */
import { describe, expect, it } from "vitest";
import { callModel } from "../src/worker/call-model.js";
import { useFakeProviders } from "./support/fake-providers.js";
import { gpt, noSleep, req } from "./support/model-steps.js";

const fakes = useFakeProviders();
const policy = (maxAttempts: number) => ({
  sleep: noSleep,
  policy: { maxAttempts, baseDelayMs: 1, maxDelayMs: 1 },
});

describe("usage carried by the Responses API's last event", () => {
  it("response.failed before any output: its usage is added to the step the retry stores", async () => {
    fakes.responses.script(
      { failed: { code: "server_error", message: "boom" }, usage: { input_tokens: 900, output_tokens: 3 } },
      { text: ["done"], usage: { input_tokens: 20, output_tokens: 8 } },
    );
    const step = await callModel(
      gpt("responses", fakes.responses.url),
      req([{ role: "user", content: "hi" }]),
      policy(2),
    );
    if (!step.ok) throw new Error(step.error);
    expect(fakes.responses.requests).toHaveLength(2);
    expect(step.message).toMatchObject({ content: "done", usage: { inputTokens: 920, outputTokens: 11 } });
  });

  it("response.failed on every attempt: what each reported is handed back as billed", async () => {
    const failed = {
      failed: { code: "server_error", message: "boom" },
      usage: { input_tokens: 500, output_tokens: 0 },
    };
    fakes.responses.script(failed, failed);
    const step = await callModel(
      gpt("responses", fakes.responses.url),
      req([{ role: "user", content: "hi" }]),
      policy(2),
    );
    expect(step.ok).toBe(false);
    expect(!step.ok && step.billed).toMatchObject({ inputTokens: 1000, outputTokens: 0 });
  });

  it("response.failed after text: the interrupted step's estimate counts at least its usage", async () => {
    fakes.responses.script({
      text: ["Partial"],
      failed: { code: "server_error", message: "boom" },
      usage: { input_tokens: 90_000, output_tokens: 4_000 },
    });
    const step = await callModel(
      gpt("responses", fakes.responses.url),
      req([{ role: "user", content: "hi" }]),
      policy(1),
    );
    if (!step.ok) throw new Error(step.error);
    expect(step.message.stopReason).toBe("interrupted");
    expect(step.estimatedUsage?.inputTokens).toBeGreaterThanOrEqual(90_000);
    expect(step.estimatedUsage?.outputTokens).toBeGreaterThanOrEqual(4_000);
  });

  it("response.incomplete: a whole step whose usage is the one it carries", async () => {
    fakes.responses.script({
      text: ["Cut by the limit"],
      incomplete: "max_output_tokens",
      usage: { input_tokens: 70, output_tokens: 16 },
    });
    const step = await callModel(
      gpt("responses", fakes.responses.url),
      req([{ role: "user", content: "hi" }]),
      policy(1),
    );
    if (!step.ok) throw new Error(step.error);
    expect(step.message).toMatchObject({
      stopReason: "max_output",
      usage: { inputTokens: 70, outputTokens: 16 },
    });
  });
});
