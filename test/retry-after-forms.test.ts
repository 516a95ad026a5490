/**
 * `retry-after` values a provider, or a proxy in front of it, sends in odd forms: the same
 * header twice (fetch joins them: "5, 10"), a negative number, a number with a sign. Only
 * delay-seconds and an HTTP-date (RFC 9110 §10.2.3) say how long to wait; V8's Date.parse
 * reads far more than HTTP-dates ("5, 10" and "-5" are dates of 2001 to it), so such values
 * asked the runtime to retry at once — no wait at all, not even the exponential backoff it
 * uses when the provider names no wait. Now: a list's first delay is the wait; anything else
 * that is not an HTTP-date is no hint. Through the real SDK and the fake server.
 */
import { expect, it } from "vitest";
import { callModel, DEFAULT_RETRY_POLICY } from "../src/worker/call-model.js";
import { retryAfterMs } from "../src/worker/models/provider.js";
import { useFakeProviders } from "./support/fake-providers.js";
import { gpt, req } from "./support/model-steps.js";

const fakes = useFakeProviders();

/** What the runtime slept before retrying a 429 with this `retry-after`. */
async function sleptAfter(retryAfter: string): Promise<number[]> {
  fakes.chat.enqueue(
    { status: 429, headers: { "retry-after": retryAfter }, errorType: "rate_limit_error" },
    { text: ["ok"] },
  );
  const slept: number[] = [];
  const step = await callModel(gpt("chat", fakes.chat.url), req([{ role: "user", content: "hi" }]), {
    sleep: async (ms) => {
      slept.push(ms);
    },
    random: () => 0.5,
    policy: DEFAULT_RETRY_POLICY,
  });
  expect(step).toMatchObject({ ok: true, message: { content: "ok" } });
  return slept;
}

it("the same header twice ('5, 10'): the first delay is waited, not none", async () => {
  expect(await sleptAfter("5, 10")).toEqual([5000]);
});

it("a negative or signed number is no hint: the exponential backoff applies, not 0", async () => {
  const backoff = await sleptAfter("4");
  expect(backoff).toEqual([4000]);
  for (const odd of ["-5", "+5"]) {
    const slept = await sleptAfter(odd);
    expect(slept).toHaveLength(1);
    expect(slept[0]).toBeGreaterThan(0);
  }
});

it("HTTP-dates and delay-seconds are read as before", () => {
  const now = Date.parse("Sun, 06 Nov 1994 08:49:30 GMT");
  const at = (value: string) => retryAfterMs(new Headers({ "retry-after": value }), now);
  expect(at("Sun, 06 Nov 1994 08:49:37 GMT")).toBe(7000);
  expect(at("Sunday, 06-Nov-94 08:49:37 GMT")).toBe(7000);
  expect(at("Sun Nov  6 08:49:37 1994")).toBeGreaterThanOrEqual(0);
  expect(at("Sun, 06 Nov 1994 08:49:00 GMT")).toBe(0);
  expect(at("2.5")).toBe(2500);
  expect(at("not a time")).toBeUndefined();
});
