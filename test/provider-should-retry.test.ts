/**
 * `x-should-retry: true|false` on an error answer: the server's own word on whether the same
 * request may succeed if sent again, which both official SDKs obey before looking at the
 * status (`shouldRetry` in their client.js). `false` on a 429/5xx: asked once, the failure is
 * final; `true` on a status not retried by itself (a 400): asked again — and every retry still
 * counts against the one budget (`maxAttempts`, `reserveRetry`), so a server that says "retry"
 * to everything is asked at most `maxAttempts` times. The OpenAI provider ignored the header
 * (a 503 saying `false` was asked 4 times, a 400 saying `true` once). Real SDKs, local fake
 * servers counting the requests they received.
 */
import { describe, expect, it } from "vitest";
import { callModel, DEFAULT_RETRY_POLICY, type ModelStep } from "../src/worker/call-model.js";
import { AnthropicModel } from "../src/worker/models/anthropic.js";
import type { ModelProvider } from "../src/worker/models/provider.js";
import { useFakeProviders } from "./support/fake-providers.js";
import { gpt, req } from "./support/model-steps.js";

const fakes = useFakeProviders();

/** One model call with the default policy; `reserved` counts the retries asked of the budget. */
async function call(model: ModelProvider, budget = Number.POSITIVE_INFINITY) {
  let reserved = 0;
  const step: ModelStep = await callModel(model, req([{ role: "user", content: "hi" }]), {
    sleep: async () => {},
    policy: DEFAULT_RETRY_POLICY,
    reserveRetry: async () => (++reserved > budget ? "the budget is spent" : null),
  });
  return { step, reserved };
}

const claude = () =>
  new AnthropicModel(
    { provider: "anthropic", model: "claude-test", baseUrl: fakes.anthropic.url },
    { keyless: true },
  );

describe("OpenAI chat completions", () => {
  const chat = () => gpt("chat", fakes.chat.url);

  it("a 503 saying x-should-retry: false is asked once, the failure final", async () => {
    fakes.chat.enqueue({ status: 503, headers: { "x-should-retry": "false" }, errorType: "server_error" });
    const { step, reserved } = await call(chat());
    expect(step).toMatchObject({ ok: false, rejected: true, attempts: 1 });
    expect(fakes.chat.requests).toHaveLength(1);
    expect(reserved).toBe(0);
  });

  it("a 429 saying x-should-retry: false is not waited out", async () => {
    fakes.chat.enqueue({
      status: 429,
      headers: { "x-should-retry": "false" },
      errorType: "rate_limit_error",
    });
    const { step } = await call(chat());
    expect(step).toMatchObject({ ok: false, rejected: true, attempts: 1 });
    expect(fakes.chat.requests).toHaveLength(1);
  });

  it("a 400 saying x-should-retry: true is asked again, through the budget", async () => {
    fakes.chat.enqueue(
      { status: 400, headers: { "x-should-retry": "true" }, errorType: "invalid_request_error" },
      { text: ["ok"] },
    );
    const { step, reserved } = await call(chat());
    expect(step).toMatchObject({ ok: true, attempts: 2, message: { content: "ok" } });
    expect(fakes.chat.requests).toHaveLength(2);
    expect(reserved).toBe(1);
  });

  it("x-should-retry: true on every answer: at most maxAttempts requests, fewer when the budget refuses", async () => {
    const always = { status: 400, headers: { "x-should-retry": "true" }, errorType: "invalid_request_error" };
    // Exactly what the two calls take (the script outlives the test).
    fakes.chat.enqueue({ ...always, times: DEFAULT_RETRY_POLICY.maxAttempts + 2 });
    expect((await call(chat())).step).toMatchObject({
      ok: false,
      attempts: DEFAULT_RETRY_POLICY.maxAttempts,
    });
    expect(fakes.chat.requests).toHaveLength(DEFAULT_RETRY_POLICY.maxAttempts);

    fakes.chat.requests.length = 0;
    const { step } = await call(chat(), 1);
    expect(step).toMatchObject({ ok: false, budgetSpent: "the budget is spent" });
    expect(fakes.chat.requests).toHaveLength(2);
  });

  it("an account out of quota stays final whatever the header says (no wait ends it)", async () => {
    fakes.chat.enqueue({
      status: 429,
      headers: { "x-should-retry": "true" },
      errorType: "insufficient_quota",
      errorCode: "insufficient_quota",
    });
    const { step } = await call(chat());
    expect(step).toMatchObject({ ok: false, rejected: true });
    expect(fakes.chat.requests).toHaveLength(1);
  });
});

/**
 * A server whose fake `fake` takes `steps`: a 5xx saying `false`, then a 400 saying `true`
 * followed by an answer. The first is asked once, the second twice.
 */
async function falseOnceTrueAgain<Step>(
  fake: { requests: unknown[]; script(...steps: Step[]): void },
  model: () => ModelProvider,
  steps: { final: Step; again: Step; answer: Step },
) {
  fake.script(steps.final);
  expect((await call(model())).step).toMatchObject({ ok: false, rejected: true, attempts: 1 });
  expect(fake.requests).toHaveLength(1);

  fake.requests.length = 0;
  fake.script(steps.again, steps.answer);
  expect((await call(model())).step).toMatchObject({ ok: true, attempts: 2 });
  expect(fake.requests).toHaveLength(2);
}

describe("OpenAI Responses", () => {
  it("a 500 saying x-should-retry: false is asked once; a 400 saying true again", async () => {
    await falseOnceTrueAgain(fakes.responses, () => gpt("responses", fakes.responses.url), {
      final: { status: 500, headers: { "x-should-retry": "false" } },
      again: {
        status: 400,
        headers: { "x-should-retry": "true" },
        error: { message: "busy", type: "invalid_request_error" },
      },
      answer: { text: ["ok"] },
    });
  });
});

describe("Anthropic (as before)", () => {
  it("a 529 saying x-should-retry: false is asked once; a 400 saying true again", async () => {
    await falseOnceTrueAgain(fakes.anthropic, claude, {
      final: {
        status: 529,
        headers: { "x-should-retry": "false" },
        error: { type: "overloaded_error", message: "Overloaded" },
      },
      again: {
        status: 400,
        headers: { "x-should-retry": "true" },
        error: { type: "invalid_request_error", message: "x" },
      },
      answer: { blocks: [{ type: "text", text: "ok" }] },
    });
  });
});
