/**
 * callModel: one model step with retries only before output (call-model.ts). The provider
 * is a hand-written fake whose attempts are async generators; `sleep` records its delays.
 */
import { getEventListeners } from "node:events";
import fc from "fast-check";
import { afterEach, describe, expect, it, vi } from "vitest";
import { MAX_TOOL_CALLS_PER_STEP, type Message, type Usage } from "../src/shared/messages.js";
import { estimateStepUsage } from "../src/shared/usage.js";
import { backoffMs, callModel, DEFAULT_RETRY_POLICY, type RetryPolicy } from "../src/worker/call-model.js";
import { attemptLimitAt } from "../src/worker/model-attempt.js";
import {
  type ModelEvent,
  type ModelProvider,
  type ModelRequest,
  ProviderError,
} from "../src/worker/models/provider.js";

/** One attempt's stream; it may watch the request (its signal). */
type Attempt = (request: ModelRequest) => AsyncGenerator<ModelEvent>;

/** A provider that plays one scripted attempt per call (the last one repeats). */
function fakeProvider(attempts: Attempt[]): ModelProvider & { calls: number } {
  const provider = {
    calls: 0,
    stream(request: ModelRequest): AsyncIterable<ModelEvent> {
      const attempt = attempts[Math.min(provider.calls, attempts.length - 1)]!;
      provider.calls++;
      return attempt(request);
    },
  };
  return provider;
}

function failing(error: unknown): Attempt {
  // biome-ignore lint/correctness/useYield: fails before any output, by design
  return async function* () {
    throw error;
  };
}

function answering(text: string, stopReason = "end_turn", usage?: Usage): Attempt {
  return async function* () {
    yield { type: "text", delta: text };
    yield { type: "done", stopReason, ...(usage ? { usage } : {}) };
  };
}

function recordingSleep() {
  const slept: number[] = [];
  return {
    slept,
    sleep: async (ms: number, _signal: AbortSignal) => {
      slept.push(ms);
    },
  };
}

function request(signal: AbortSignal = new AbortController().signal): ModelRequest {
  return { sessionId: "s1", history: [{ role: "user", content: "hi" }], tools: [], signal };
}

const POLICY: RetryPolicy = { maxAttempts: 4, baseDelayMs: 100, maxDelayMs: 1_000 };

describe("callModel retries only before output", () => {
  it("retries retryable failures with increasing backoff and succeeds on the third attempt", async () => {
    const provider = fakeProvider([
      failing(new ProviderError("503", true)),
      failing(new ProviderError("503", true)),
      answering("hello"),
    ]);
    const { slept, sleep } = recordingSleep();
    const step = await callModel(provider, request(), { sleep, random: () => 0.5, policy: POLICY });
    expect(step).toEqual({
      ok: true,
      attempts: 3,
      message: { role: "assistant", content: "hello", stopReason: "end_turn" },
      // This fake reports no usage: the budget counts an estimate.
      estimatedUsage: { inputTokens: expect.any(Number), outputTokens: expect.any(Number) },
    });
    expect(provider.calls).toBe(3);
    // 0.75 of the capped exponential: 100 → 75, 200 → 150.
    expect(slept).toEqual([75, 150]);
    expect(slept[1]!).toBeGreaterThan(slept[0]!);
  });

  it("honours a provider's retry-after, capped at maxDelayMs", async () => {
    const provider = fakeProvider([
      failing(new ProviderError("429", true, 700)),
      failing(new ProviderError("429", true, 60_000)),
      answering("ok"),
    ]);
    const { slept, sleep } = recordingSleep();
    const step = await callModel(provider, request(), { sleep, random: () => 0.5, policy: POLICY });
    expect(step.ok).toBe(true);
    expect(slept).toEqual([700, POLICY.maxDelayMs]);
  });

  it("does not retry a non-retryable error, and says the provider rejected the request", async () => {
    const provider = fakeProvider([failing(new ProviderError("401 bad key", false)), answering("never")]);
    const { slept, sleep } = recordingSleep();
    const step = await callModel(provider, request(), { sleep, random: () => 0.5, policy: POLICY });
    expect(step).toEqual({ ok: false, aborted: false, error: "401 bad key", attempts: 1, rejected: true });
    expect(provider.calls).toBe(1);
    expect(slept).toEqual([]);
  });

  it("gives up after maxAttempts", async () => {
    const provider = fakeProvider([failing(new ProviderError("connection refused", true))]);
    const { slept, sleep } = recordingSleep();
    const step = await callModel(provider, request(), { sleep, random: () => 0.5, policy: POLICY });
    expect(step).toEqual({
      ok: false,
      aborted: false,
      error: "connection refused",
      attempts: POLICY.maxAttempts,
    });
    expect(provider.calls).toBe(POLICY.maxAttempts);
    expect(slept).toHaveLength(POLICY.maxAttempts - 1);
  });

  it("treats a plain Error (not a ProviderError) as retryable", async () => {
    const provider = fakeProvider([failing(new Error("ECONNRESET")), answering("ok")]);
    const { sleep } = recordingSleep();
    const step = await callModel(provider, request(), { sleep, random: () => 0.5, policy: POLICY });
    expect(step).toMatchObject({ ok: true, attempts: 2 });
  });

  it("keeps the partial text as an interrupted response once output started, without retrying", async () => {
    const provider = fakeProvider([
      async function* () {
        yield { type: "text", delta: "Hello, " };
        yield { type: "tool_call", call: { id: "c1", name: "write_file", arguments: { path: "a" } } };
        yield { type: "text", delta: "wor" };
        throw new ProviderError("the stream broke", true);
      },
      answering("a second attempt must not happen"),
    ]);
    const { slept, sleep } = recordingSleep();
    const step = await callModel(provider, request(), { sleep, random: () => 0.5, policy: POLICY });
    const message = { role: "assistant" as const, content: "Hello, wor", stopReason: "interrupted" };
    // Sent and partly answered, so billed: the budget counts an estimate of it (the half call included nowhere).
    expect(step).toEqual({
      ok: true,
      attempts: 1,
      message,
      estimatedUsage: estimateStepUsage(request(), message),
    });
    // Half-formed tool calls are dropped.
    expect(step.ok && step.message.toolCalls).toBeFalsy();
    expect(provider.calls).toBe(1);
    expect(slept).toEqual([]);
  });

  it("records a stream that ends without `done` as interrupted", async () => {
    const provider = fakeProvider([
      async function* () {
        yield { type: "text", delta: "partial" };
      },
    ]);
    const { sleep } = recordingSleep();
    const step = await callModel(provider, request(), { sleep, random: () => 0.5, policy: POLICY });
    const message = { role: "assistant" as const, content: "partial", stopReason: "interrupted" };
    expect(step).toEqual({
      ok: true,
      attempts: 1,
      message,
      estimatedUsage: estimateStepUsage(request(), message),
    });
    expect(provider.calls).toBe(1);
  });

  it("reports an aborted request as aborted, without retrying", async () => {
    const controller = new AbortController();
    const provider = fakeProvider([
      // biome-ignore lint/correctness/useYield: fails before any output, by design
      async function* () {
        controller.abort(new Error("shutting down"));
        throw new ProviderError("request aborted", true);
      },
    ]);
    const { slept, sleep } = recordingSleep();
    const step = await callModel(provider, request(controller.signal), {
      sleep,
      random: () => 0.5,
      policy: POLICY,
    });
    expect(step).toEqual({ ok: false, aborted: true, error: "request aborted", attempts: 1 });
    expect(provider.calls).toBe(1);
    expect(slept).toEqual([]);
  });

  it("reports aborted when the backoff sleep is aborted", async () => {
    const provider = fakeProvider([failing(new ProviderError("503", true))]);
    const sleep = async () => {
      throw new Error("aborted");
    };
    const step = await callModel(provider, request(), { sleep, random: () => 0.5, policy: POLICY });
    expect(step).toMatchObject({ ok: false, aborted: true, attempts: 1 });
    expect(provider.calls).toBe(1);
  });

  it("passes usage, tool calls and the stop reason through", async () => {
    const usage = { inputTokens: 12, outputTokens: 34 };
    const provider = fakeProvider([
      async function* () {
        yield { type: "text", delta: "Let me " };
        yield { type: "text", delta: "write." };
        yield { type: "tool_call", call: { id: "c1", name: "write_file", arguments: { path: "a" } } };
        yield { type: "done", stopReason: "tool_use", usage };
      },
    ]);
    const { sleep } = recordingSleep();
    const step = await callModel(provider, request(), { sleep, random: () => 0.5, policy: POLICY });
    expect(step).toEqual({
      ok: true,
      attempts: 1,
      message: {
        role: "assistant",
        content: "Let me write.",
        toolCalls: [{ id: "c1", name: "write_file", arguments: { path: "a" } }],
        stopReason: "tool_use",
        usage,
      },
    });
  });
});

describe("backoffMs", () => {
  const policyArb = fc
    .record({
      maxAttempts: fc.integer({ min: 1, max: 10 }),
      baseDelayMs: fc.integer({ min: 1, max: 5_000 }),
      maxDelayMs: fc.integer({ min: 1, max: 60_000 }),
    })
    .filter((p) => p.baseDelayMs <= p.maxDelayMs);

  it("lies between 0.5x and 1x of the capped exponential", () => {
    fc.assert(
      fc.property(
        policyArb,
        fc.integer({ min: 1, max: 40 }),
        fc.double({ min: 0, max: 1, maxExcluded: true, noNaN: true }),
        (policy, attempt, r) => {
          const capped = Math.min(policy.baseDelayMs * 2 ** (attempt - 1), policy.maxDelayMs);
          const ms = backoffMs(policy, attempt, () => r);
          expect(Number.isInteger(ms)).toBe(true);
          // Rounding may move the value by at most half a millisecond.
          expect(ms).toBeGreaterThanOrEqual(capped / 2 - 0.5);
          expect(ms).toBeLessThanOrEqual(capped);
          expect(ms).toBeLessThanOrEqual(policy.maxDelayMs);
        },
      ),
      { numRuns: 500 },
    );
  });

  it("never grows when the attempt number grows (same random)", () => {
    fc.assert(
      fc.property(policyArb, fc.integer({ min: 1, max: 30 }), (policy, attempt) => {
        expect(backoffMs(policy, attempt + 1, () => 0.5)).toBeGreaterThanOrEqual(
          backoffMs(policy, attempt, () => 0.5),
        );
      }),
    );
  });

  it("uses retry-after verbatim up to the cap", () => {
    fc.assert(
      fc.property(policyArb, fc.integer({ min: 0, max: 120_000 }), (policy, retryAfter) => {
        expect(backoffMs(policy, 1, () => 0.99, retryAfter)).toBe(Math.min(retryAfter, policy.maxDelayMs));
      }),
    );
  });

  it("defaults to 4 attempts from 250 ms, capped at 10 s; a request streams at most 10 min", () => {
    expect(DEFAULT_RETRY_POLICY).toEqual({
      maxAttempts: 4,
      baseDelayMs: 250,
      maxDelayMs: 10_000,
      idleTimeoutMs: 120_000,
      maxStepMs: 600_000,
      maxOutputChars: 4_000_000,
    });
    expect(backoffMs(DEFAULT_RETRY_POLICY, 1, () => 0)).toBe(125);
    expect(backoffMs(DEFAULT_RETRY_POLICY, 20, () => 0)).toBe(5_000);
  });
});

/** An attempt that yields `before` text deltas, then hangs until its request is aborted. */
function hanging(before: string[]): (request: ModelRequest) => AsyncGenerator<ModelEvent> {
  return async function* (request) {
    for (const delta of before) yield { type: "text", delta };
    await new Promise((_, reject) => {
      request.signal.addEventListener("abort", () => reject(request.signal.reason), { once: true });
    });
  };
}

describe("callModel and the caller's signal", () => {
  it("passes the caller's abort on to the model's request, and leaves no listener behind", async () => {
    const outer = new AbortController();
    const provider: ModelProvider = { stream: (req) => hanging([])(req) };
    const { sleep } = recordingSleep();
    setTimeout(() => outer.abort(new Error("shutting down")), 20);
    const step = await callModel(provider, request(outer.signal), {
      sleep,
      policy: { ...POLICY, idleTimeoutMs: 10_000 },
    });
    expect(step).toMatchObject({ ok: false, aborted: true, attempts: 1 });
    expect(getEventListeners(outer.signal, "abort")).toHaveLength(0);
  });

  it("aborts the request at once when the caller's signal was aborted before the call", async () => {
    const outer = new AbortController();
    outer.abort(new Error("cancelled"));
    const seen: boolean[] = [];
    const provider: ModelProvider = {
      // biome-ignore lint/correctness/useYield: fails before any output, as an SDK does on an aborted signal
      async *stream(req) {
        seen.push(req.signal.aborted);
        if (req.signal.aborted) throw req.signal.reason;
      },
    };
    const { sleep } = recordingSleep();
    const step = await callModel(provider, request(outer.signal), {
      sleep,
      policy: { ...POLICY, idleTimeoutMs: 10_000 },
    });
    expect(seen).toEqual([true]);
    expect(step).toMatchObject({ ok: false, aborted: true });
  });

  it("leaves no listener on the caller's signal after an answer", async () => {
    const outer = new AbortController();
    const provider: ModelProvider = { stream: (req) => answering("ok")(req) };
    const { sleep } = recordingSleep();
    const step = await callModel(provider, request(outer.signal), { sleep, policy: POLICY });
    expect(step).toMatchObject({ ok: true, message: { content: "ok" } });
    expect(getEventListeners(outer.signal, "abort")).toHaveLength(0);
  });
});

describe("callModel idle timeout", () => {
  it("treats a stream that goes quiet after output as interrupted, keeping the partial text", async () => {
    const provider = fakeProvider([hanging(["half an ans"])]);
    const { sleep } = recordingSleep();
    const step = await callModel(provider, request(), { sleep, policy: { ...POLICY, idleTimeoutMs: 50 } });
    expect(step).toMatchObject({ ok: true, message: { content: "half an ans", stopReason: "interrupted" } });
    expect(provider.calls).toBe(1);
  });

  it("retries a stream that goes quiet before any output", async () => {
    const provider = fakeProvider([hanging([]), answering("ok")]);
    const { sleep, slept } = recordingSleep();
    const step = await callModel(provider, request(), { sleep, policy: { ...POLICY, idleTimeoutMs: 50 } });
    expect(step).toMatchObject({ ok: true, message: { content: "ok", stopReason: "end_turn" } });
    expect(provider.calls).toBe(2);
    expect(slept).toHaveLength(1);
  });
});

describe("callModel idle timer: one per attempt, for both limits, pushed back by each event", () => {
  afterEach(() => {
    vi.restoreAllMocks();
    vi.useRealTimers();
  });

  it("starts no timer per stream event: a 2,000-delta answer arms one timer, for the idle and the step limit both", async () => {
    const deltas = Array.from({ length: 2_000 }, () => "x");
    const provider = fakeProvider([
      async function* () {
        for (const delta of deltas) yield { type: "text", delta };
        yield { type: "done", stopReason: "end_turn" };
      },
    ]);
    const { sleep } = recordingSleep();
    const timers = vi.spyOn(globalThis, "setTimeout");
    const step = await callModel(provider, request(), {
      sleep,
      policy: { ...POLICY, idleTimeoutMs: 10_000 },
    });
    const started = timers.mock.calls.length;
    vi.restoreAllMocks();
    expect(step).toMatchObject({ ok: true, message: { content: deltas.join(""), stopReason: "end_turn" } });
    expect(started).toBe(1);
  });

  it("cuts a stream whose events keep coming at the step limit, to the millisecond, with one timer", async () => {
    vi.useFakeTimers();
    // An event every 10 ms under an idle timeout of 50 ms and a step limit of 100 ms.
    const provider = fakeProvider([trickling(10)]);
    const { sleep } = recordingSleep();
    let settled = false;
    const answer = callModel(provider, request(), {
      sleep,
      policy: { ...POLICY, idleTimeoutMs: 50, maxStepMs: 100 },
    });
    void answer.then(() => {
      settled = true;
    });
    await vi.advanceTimersByTimeAsync(99);
    expect(settled).toBe(false);
    await vi.advanceTimersByTimeAsync(1);
    const step = await answer;
    expect(step).toMatchObject({ ok: true, message: { stopReason: "interrupted" } });
    expect(step.ok && step.message.content).toBe(".".repeat(10));
    expect(provider.calls).toBe(1);
  });

  it("never cuts a stream whose events come closer together than the idle timeout, however long it streams", async () => {
    vi.useFakeTimers();
    // 30 events 40 ms apart (1.2 s in all) under an idle timeout of 50 ms.
    const provider = fakeProvider([
      async function* () {
        for (let i = 0; i < 30; i++) {
          await new Promise((resolve) => setTimeout(resolve, 40));
          yield { type: "text", delta: "." };
        }
        yield { type: "done", stopReason: "end_turn" };
      },
    ]);
    const { sleep } = recordingSleep();
    const answer = callModel(provider, request(), { sleep, policy: { ...POLICY, idleTimeoutMs: 50 } });
    for (let i = 0; i < 30; i++) await vi.advanceTimersByTimeAsync(40);
    expect(await answer).toMatchObject({
      ok: true,
      message: { content: ".".repeat(30), stopReason: "end_turn" },
    });
    expect(provider.calls).toBe(1);
  });

  it("still cuts the stream once the events stop for the idle timeout, counted from the last event", async () => {
    vi.useFakeTimers();
    const provider = fakeProvider([
      async function* (req) {
        for (let i = 0; i < 5; i++) {
          await new Promise((resolve) => setTimeout(resolve, 40));
          yield { type: "text", delta: "." };
        }
        await new Promise((_, reject) => {
          req.signal.addEventListener("abort", () => reject(req.signal.reason), { once: true });
        });
      },
    ]);
    const { sleep } = recordingSleep();
    let settled = false;
    const answer = callModel(provider, request(), { sleep, policy: { ...POLICY, idleTimeoutMs: 50 } });
    void answer.then(() => {
      settled = true;
    });
    // The fifth event comes at 200 ms: 49 ms later the stream is still open, at 50 it is cut.
    await vi.advanceTimersByTimeAsync(200 + 49);
    expect(settled).toBe(false);
    await vi.advanceTimersByTimeAsync(1);
    expect(await answer).toMatchObject({
      ok: true,
      message: { content: ".....", stopReason: "interrupted" },
    });
  });
});

describe("attemptLimitAt: what an attempt's timer does when it fires", () => {
  it("waits for the nearer limit, cuts as idle from the last event, cuts as too long from the start", () => {
    // started at 0, idle 50, step 100
    expect(attemptLimitAt(0, 0, 30, 50, 100)).toEqual({ kind: "wait", ms: 20 });
    expect(attemptLimitAt(0, 40, 50, 50, 100)).toEqual({ kind: "wait", ms: 40 });
    expect(attemptLimitAt(0, 80, 90, 50, 100)).toEqual({ kind: "wait", ms: 10 });
    expect(attemptLimitAt(0, 40, 90, 50, 100)).toEqual({ kind: "idle" });
    expect(attemptLimitAt(0, 95, 100, 50, 100)).toEqual({ kind: "step" });
    // both due at once: the idle cut, as the idle timer won before
    expect(attemptLimitAt(0, 50, 100, 50, 100)).toEqual({ kind: "idle" });
  });
});

/** An attempt that sends a character at once, then one every `everyMs`, until it is aborted. */
function trickling(everyMs: number): (request: ModelRequest) => AsyncGenerator<ModelEvent> {
  return async function* (request) {
    for (;;) {
      yield { type: "text", delta: "." };
      // One abort listener at a time, removed when its tick comes: the signal lives for the
      // whole attempt, and a listener left per tick made Node warn of a leak.
      await new Promise((resolve, reject) => {
        const onAbort = () => {
          clearTimeout(timer);
          reject(request.signal.reason);
        };
        const timer = setTimeout(() => {
          request.signal.removeEventListener("abort", onAbort);
          resolve(undefined);
        }, everyMs);
        request.signal.addEventListener("abort", onAbort, { once: true });
      });
    }
  };
}

describe("callModel step limit (maxStepMs)", () => {
  it("ends a stream that never goes quiet but never finishes as interrupted, its text kept, not retried", async () => {
    const provider = fakeProvider([trickling(5)]);
    const { sleep } = recordingSleep();
    const step = await callModel(provider, request(), {
      sleep,
      policy: { ...POLICY, idleTimeoutMs: 10_000, maxStepMs: 60 },
    });
    expect(step).toMatchObject({ ok: true, message: { stopReason: "interrupted" } });
    expect(step.ok && step.message.content).toMatch(/^\.+$/);
    expect(provider.calls).toBe(1);
  });

  it("retries a request that sent nothing at all by the limit: there is no output to keep", async () => {
    const provider = fakeProvider([hanging([]), answering("ok")]);
    const { sleep, slept } = recordingSleep();
    const step = await callModel(provider, request(), {
      sleep,
      policy: { ...POLICY, idleTimeoutMs: 10_000, maxStepMs: 50 },
    });
    expect(step).toMatchObject({ ok: true, message: { content: "ok", stopReason: "end_turn" } });
    expect(provider.calls).toBe(2);
    expect(slept).toHaveLength(1);
  });
});

describe("callModel output bound (maxOutputChars)", () => {
  it("cuts text past the bound: the step is interrupted with the text up to it, not retried", async () => {
    const provider = fakeProvider([
      async function* () {
        yield { type: "text", delta: "x".repeat(60) };
        yield { type: "text", delta: "y".repeat(60) };
        yield { type: "done", stopReason: "end_turn" };
      },
    ]);
    const { sleep } = recordingSleep();
    const step = await callModel(provider, request(), { sleep, policy: { ...POLICY, maxOutputChars: 100 } });
    expect(step).toMatchObject({
      ok: true,
      message: { content: `${"x".repeat(60)}${"y".repeat(40)}`, stopReason: "interrupted" },
    });
    expect(provider.calls).toBe(1);
  });

  it("counts a tool call's arguments too: a huge argument is dropped, never handed to a tool", async () => {
    const provider = fakeProvider([
      async function* () {
        yield { type: "text", delta: "writing" };
        yield {
          type: "tool_call",
          call: { id: "c1", name: "write_file", arguments: { path: "a", content: "z".repeat(500) } },
        };
        yield { type: "done", stopReason: "tool_use" };
      },
    ]);
    const { sleep } = recordingSleep();
    const step = await callModel(provider, request(), { sleep, policy: { ...POLICY, maxOutputChars: 100 } });
    expect(step).toMatchObject({ ok: true, message: { content: "writing", stopReason: "interrupted" } });
    expect(step.ok && step.message.toolCalls).toBeFalsy();
  });

  it(`cuts a step asking for more than ${MAX_TOOL_CALLS_PER_STEP} tool calls: interrupted with its text, no call kept`, async () => {
    const many = (n: number) =>
      fakeProvider([
        async function* () {
          yield { type: "text", delta: "fanning out" };
          for (let i = 0; i < n; i++)
            yield { type: "tool_call", call: { id: `c${i}`, name: "sleep", arguments: { ms: 1 } } };
          yield { type: "done", stopReason: "tool_use" };
        },
      ]);
    const { sleep } = recordingSleep();
    const over = many(MAX_TOOL_CALLS_PER_STEP + 1);
    const cut = await callModel(over, request(), { sleep, policy: POLICY });
    expect(cut).toMatchObject({ ok: true, message: { content: "fanning out", stopReason: "interrupted" } });
    expect(cut.ok && cut.message.toolCalls).toBeFalsy();
    expect(over.calls).toBe(1);
    // At the bound, every call is kept.
    const at = await callModel(many(MAX_TOOL_CALLS_PER_STEP), request(), { sleep, policy: POLICY });
    expect(at).toMatchObject({ ok: true, message: { stopReason: "tool_use" } });
    expect(at.ok && at.message.toolCalls).toHaveLength(MAX_TOOL_CALLS_PER_STEP);
  });

  it("lets calls and text within the bound through whole", async () => {
    const provider = fakeProvider([
      async function* () {
        yield { type: "text", delta: "ok" };
        yield { type: "tool_call", call: { id: "c1", name: "sleep", arguments: { ms: 1 } } };
        yield { type: "done", stopReason: "tool_use" };
      },
    ]);
    const { sleep } = recordingSleep();
    const step = await callModel(provider, request(), { sleep, policy: { ...POLICY, maxOutputChars: 100 } });
    expect(step).toMatchObject({ ok: true, message: { content: "ok", stopReason: "tool_use" } });
    expect(step.ok && step.message.toolCalls).toHaveLength(1);
  });
});

describe("estimateStepUsage of a growing history", () => {
  const answer = { content: "ok" };
  /** The estimate of a fresh array: nothing counted before. */
  const fresh = (history: Message[]) => estimateStepUsage({ history: [...history] }, answer);

  it("is what a count of the whole history gives, as the array grows, is cut or has its end replaced", () => {
    const history: Message[] = [];
    for (let i = 0; i < 30; i++) {
      history.push(
        i % 3 === 0
          ? { role: "user", content: `question ${i} ${"é".repeat(i)}` }
          : { role: "assistant", content: `answer ${i}`, stopReason: "end_turn" },
      );
      expect(estimateStepUsage({ history }, answer)).toEqual(fresh(history));
    }
    history.length = 10;
    expect(estimateStepUsage({ history }, answer)).toEqual(fresh(history));
    history[9] = { role: "user", content: "x".repeat(3_000) };
    expect(estimateStepUsage({ history }, answer)).toEqual(fresh(history));
    history.push({ role: "internal", content: "more" });
    expect(estimateStepUsage({ history }, answer)).toEqual(fresh(history));
  });
});
