/**
 * The endpoint gate and call-model.ts together (contracts §15), with a fake limits store: a
 * 429 pauses the endpoint and is asked again without counting an attempt; a request that
 * must wait long throws CapacityWait before anything is sent; the metrics count each outcome.
 */
import { describe, expect, it } from "vitest";
import { createMetrics, initEndpointSeries } from "../src/shared/metrics.js";
import type { Acquired, Confirmed, ProviderLimits } from "../src/shared/provider-limits.js";
import { DEFAULT_GATE_TUNING } from "../src/shared/provider-limits.js";
import { callModel } from "../src/worker/call-model.js";
import {
  afterConfirm,
  CapacityWait,
  gatedModel,
  isRateLimited,
  type WaitLedger,
} from "../src/worker/endpoint-gate.js";
import { type ModelEvent, type ModelProvider, ProviderError } from "../src/worker/models/provider.js";

function fakeLimits(answers: Acquired[], checks: Confirmed[] = []) {
  const calls = { acquire: 0, pauses: [] as (number | undefined)[], released: 0, confirmed: 0 };
  const limits = {
    tuning: { ...DEFAULT_GATE_TUNING, maxWaitMs: 1_000 },
    async acquire() {
      calls.acquire++;
      return answers.shift() ?? { granted: true, waitMs: 0, permit: "p" };
    },
    async pause(_endpoint: string, ms: number | undefined) {
      calls.pauses.push(ms);
      return ms ?? 0;
    },
    async release() {
      calls.released++;
    },
    async renew() {},
    async confirm() {
      calls.confirmed++;
      return checks.shift() ?? { ok: true };
    },
    async correctTokens() {},
  } as unknown as ProviderLimits;
  return { limits, calls };
}

function scriptedProvider(script: (ModelEvent[] | Error)[]): ModelProvider & { sent: number } {
  const provider = {
    sent: 0,
    async *stream() {
      provider.sent++;
      const next = script.shift();
      if (!next || next instanceof Error) throw next ?? new Error("nothing scripted");
      for (const event of next) yield event;
    },
  };
  return provider;
}

const done: ModelEvent[] = [
  { type: "text", delta: "hi" },
  { type: "done", stopReason: "end_turn", usage: { inputTokens: 3, outputTokens: 1 } },
];
const tooMany = () =>
  new ProviderError("openai: HTTP 429: slow down", true, 2_000, { status: 429, endpoint: "ep" });
const request = () => ({ sessionId: "s", history: [], tools: [], signal: new AbortController().signal });

describe("endpoint gate", () => {
  it("recognises rate-limit answers: 429, 529, overloaded types", () => {
    expect(isRateLimited(tooMany())).toBe(true);
    expect(isRateLimited(new ProviderError("x", true, undefined, { status: 529 }))).toBe(true);
    expect(isRateLimited(new ProviderError("x", true, undefined, { type: "overloaded_error" }))).toBe(true);
    expect(isRateLimited(new ProviderError("x", true, undefined, { status: 500 }))).toBe(false);
    expect(isRateLimited(new Error("429"))).toBe(false);
  });

  it("a 429 pauses the endpoint for its retry-after and is asked again without counting an attempt", async () => {
    const metrics = createMetrics("test");
    initEndpointSeries(metrics, [{ name: "ep", limits: { requestsPerMinute: 60 } }]);
    const { limits, calls } = fakeLimits([]);
    const provider = scriptedProvider([tooMany(), tooMany(), tooMany(), tooMany(), tooMany(), done]);
    const ledger: WaitLedger = { waitedMs: 0 };
    const model = gatedModel(
      provider,
      { endpoint: "ep", limits: { requestsPerMinute: 60 }, tenant: "t", request: "run-1", ledger },
      { limits, shares: new Map(), metrics, sleep: async () => {} },
    );
    const step = await callModel(model, request(), {
      sleep: async () => {},
      policy: { maxAttempts: 2, baseDelayMs: 1, maxDelayMs: 1 },
    });
    // Five 429s, more than maxAttempts: none of them counted.
    expect(step).toMatchObject({ ok: true, attempts: 1 });
    expect(calls.pauses).toEqual([2_000, 2_000, 2_000, 2_000, 2_000]);
    expect(calls.acquire).toBe(6);
    const text = await metrics.registry.getSingleMetricAsString("fleet_model_requests_total");
    expect(text).toContain('fleet_model_requests_total{endpoint="ep",outcome="rate_limited",role="test"} 5');
    expect(text).toContain('fleet_model_requests_total{endpoint="ep",outcome="ok",role="test"} 1');
    expect(text).toContain('fleet_model_requests_total{endpoint="ep",outcome="error",role="test"} 0');
    const waits = await metrics.registry.getSingleMetricAsString("fleet_endpoint_wait_seconds");
    expect(waits).toContain('fleet_endpoint_wait_seconds_count{role="test",endpoint="ep"} 6');
  });

  it("a long wait throws CapacityWait before anything is sent; short waits are slept here", async () => {
    const metrics = createMetrics("test");
    const { limits } = fakeLimits([
      { granted: false, retryInMs: 300, reason: "rate" },
      { granted: false, retryInMs: 5_000, reason: "rate" },
    ]);
    const provider = scriptedProvider([done]);
    const slept: number[] = [];
    const ledger: WaitLedger = { waitedMs: 0 };
    const model = gatedModel(
      provider,
      { endpoint: "ep", limits: { requestsPerMinute: 60 }, tenant: "t", request: "run-1", ledger },
      {
        limits,
        shares: new Map(),
        metrics,
        sleep: async (ms) => {
          slept.push(ms);
        },
      },
    );
    const failed = callModel(model, request(), { sleep: async () => {} });
    await expect(failed).rejects.toBeInstanceOf(CapacityWait);
    await expect(failed).rejects.toMatchObject({ endpoint: "ep", retryInMs: 5_000 });
    expect(slept).toEqual([300]);
    expect(provider.sent).toBe(0);
    expect(ledger.askedAt).toBeTypeOf("number");
  });

  it("a granted request checked again before sending: a pause found then is waited here or handed back, a lapsed permit asked again; nothing sent meanwhile", async () => {
    expect(afterConfirm({ ok: true }, 0, 1_000)).toEqual({ kind: "send" });
    expect(afterConfirm({ ok: false, reason: "paused", pausedMs: 400 }, 500, 1_000)).toEqual({
      kind: "wait",
      ms: 400,
    });
    expect(afterConfirm({ ok: false, reason: "paused", pausedMs: 400 }, 700, 1_000)).toEqual({
      kind: "hand_back",
      retryInMs: 400,
    });
    expect(afterConfirm({ ok: false, reason: "permit_lost" }, 900, 1_000)).toEqual({ kind: "ask_again" });
    const metrics = createMetrics("test");
    const { limits, calls } = fakeLimits(
      [],
      [
        { ok: false, reason: "paused", pausedMs: 300 },
        { ok: false, reason: "permit_lost" },
      ],
    );
    const provider = scriptedProvider([done]);
    const slept: number[] = [];
    const model = gatedModel(
      provider,
      { endpoint: "ep", limits: { maxConcurrent: 2 }, tenant: "t", request: "r", ledger: { waitedMs: 0 } },
      {
        limits,
        shares: new Map(),
        metrics,
        sleep: async (ms) => {
          slept.push(ms);
        },
      },
    );
    const step = await callModel(model, request(), { sleep: async () => {} });
    // Three grants, the first two given back unsent: one request, one attempt.
    expect(step).toMatchObject({ ok: true, attempts: 1 });
    expect(slept).toEqual([300]);
    expect(calls).toMatchObject({ acquire: 3, confirmed: 3, released: 3 });
    expect(provider.sent).toBe(1);
    // A longer pause found at the check: the job is handed back, nothing sent.
    const long = fakeLimits([], [{ ok: false, reason: "paused", pausedMs: 5_000 }]);
    const unsent = scriptedProvider([done]);
    const ledger: WaitLedger = { waitedMs: 0 };
    const handedBack = callModel(
      gatedModel(
        unsent,
        { endpoint: "ep", limits: undefined, tenant: "t", request: "r", ledger },
        { limits: long.limits, shares: new Map(), metrics, sleep: async () => {} },
      ),
      request(),
      { sleep: async () => {} },
    );
    await expect(handedBack).rejects.toMatchObject({ name: "CapacityWait", retryInMs: 5_000 });
    expect(unsent.sent).toBe(0);
    expect(ledger.askedAt).toBeTypeOf("number");
  });

  it("other provider errors are attempts as before, and count as outcome error", async () => {
    const metrics = createMetrics("test");
    const { limits, calls } = fakeLimits([]);
    const provider = scriptedProvider([
      new ProviderError("boom", true, undefined, { status: 500 }),
      new ProviderError("boom", true, undefined, { status: 500 }),
    ]);
    const model = gatedModel(
      provider,
      { endpoint: "ep", limits: undefined, tenant: "t", request: "r", ledger: { waitedMs: 0 } },
      { limits, shares: new Map(), metrics, sleep: async () => {} },
    );
    const step = await callModel(model, request(), {
      sleep: async () => {},
      policy: { maxAttempts: 2, baseDelayMs: 1, maxDelayMs: 1 },
    });
    expect(step).toMatchObject({ ok: false, attempts: 2 });
    expect(calls.pauses).toEqual([]);
    const text = await metrics.registry.getSingleMetricAsString("fleet_model_requests_total");
    expect(text).toContain('fleet_model_requests_total{endpoint="ep",outcome="error",role="test"} 2');
  });
});
