/** The scripted model (contracts.md §5): steps, ids, stop reasons, faults, fleet-wide fault counts. */
import { randomUUID } from "node:crypto";
import { getEventListeners } from "node:events";
import { Redis } from "ioredis";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import type { ScriptedStep } from "../src/shared/agent-config.js";
import type { Message } from "../src/shared/messages.js";
import { callModel } from "../src/worker/call-model.js";
import { redisFaultCounter } from "../src/worker/models/create-model.js";
import { type ModelEvent, type ModelRequest, ProviderError } from "../src/worker/models/provider.js";
import { type FaultCounter, ScriptedModel, scriptPosition } from "../src/worker/models/scripted.js";

const REDIS_URL = process.env.TEST_REDIS_URL ?? "redis://127.0.0.1:6379";

/** A fault counter in memory, counting per key like the Redis one. */
function memoryCounter(): FaultCounter & { counts: Map<string, number> } {
  const counts = new Map<string, number>();
  return {
    counts,
    async increment(key) {
      const n = (counts.get(key) ?? 0) + 1;
      counts.set(key, n);
      return n;
    },
  };
}

function assistants(n: number): Message[] {
  const out: Message[] = [{ role: "user", content: "go" }];
  for (let i = 0; i < n; i++) {
    out.push({ role: "assistant", content: `step ${i}`, stopReason: "end_turn" });
    out.push({ role: "user", content: "more" });
  }
  return out;
}

function request(history: Message[], sessionId = "s1", signal = new AbortController().signal): ModelRequest {
  return { sessionId, history, tools: [], signal };
}

/** Drains a stream: the events that arrived and the error that ended it, if any. */
async function drain(stream: AsyncIterable<ModelEvent>): Promise<{ events: ModelEvent[]; error?: unknown }> {
  const events: ModelEvent[] = [];
  try {
    for await (const event of stream) events.push(event);
    return { events };
  } catch (error) {
    return { events, error };
  }
}

function textOf(events: ModelEvent[]): string {
  return events.map((e) => (e.type === "text" ? e.delta : "")).join("");
}

const model = (steps: ScriptedStep[], faults: FaultCounter = memoryCounter()) =>
  new ScriptedModel(steps, { faults, sleep: async () => {} });

describe("ScriptedModel steps", () => {
  const steps: ScriptedStep[] = [
    { toolCalls: [{ name: "write_file", arguments: { path: "a" } }] },
    { text: "second" },
    { text: "last", toolCalls: [{ id: "fixed", name: "fail", arguments: { message: "x" } }] },
  ];

  it("uses the step numbered by the assistant messages already in the history", async () => {
    const m = model(steps);
    const first = await drain(m.stream(request(assistants(0))));
    expect(first.events).toEqual([
      { type: "tool_call", call: { id: "call_0_0", name: "write_file", arguments: { path: "a" } } },
      { type: "done", stopReason: "tool_use" },
    ]);
    const second = await drain(m.stream(request(assistants(1))));
    expect(textOf(second.events)).toBe("second");
    expect(second.events.at(-1)).toEqual({ type: "done", stopReason: "end_turn" });
  });

  it("streams text in several pieces", async () => {
    const { events } = await drain(model([{ text: "abcdefgh" }]).stream(request(assistants(0))));
    expect(events.filter((e) => e.type === "text").length).toBeGreaterThan(1);
    expect(textOf(events)).toBe("abcdefgh");
  });

  it("repeats the last step past the end, suffixing explicit ids to keep them unique", async () => {
    const m = model(steps);
    const atLast = await drain(m.stream(request(assistants(2))));
    const past = await drain(m.stream(request(assistants(3))));
    const further = await drain(m.stream(request(assistants(4))));
    const ids = [atLast, past, further].map(
      (r) => r.events.flatMap((e) => (e.type === "tool_call" ? [e.call.id] : []))[0],
    );
    expect(ids).toEqual(["fixed", "fixed_3", "fixed_4"]);
    for (const r of [atLast, past, further]) {
      expect(textOf(r.events)).toBe("last");
      expect(r.events.at(-1)).toEqual({ type: "done", stopReason: "tool_use" });
    }
  });

  it("generates ids call_<step>_<i> when absent, unique even when the last step repeats", async () => {
    const m = model([
      {
        toolCalls: [
          { name: "a", arguments: {} },
          { name: "b", arguments: {} },
        ],
      },
    ]);
    const ids = async (n: number) =>
      (await drain(m.stream(request(assistants(n))))).events.flatMap((e) =>
        e.type === "tool_call" ? [e.call.id] : [],
      );
    expect(await ids(0)).toEqual(["call_0_0", "call_0_1"]);
    expect(await ids(1)).toEqual(["call_1_0", "call_1_1"]);
  });

  it("passes an explicit stop reason through, known or not", async () => {
    for (const stopReason of ["max_output", "refusal", "paused", "context_full", "brand_new"]) {
      const { events } = await drain(model([{ text: "x", stopReason }]).stream(request(assistants(0))));
      expect(events.at(-1)).toEqual({ type: "done", stopReason });
    }
    const withCalls = await drain(
      model([{ toolCalls: [{ name: "a", arguments: {} }], stopReason: "max_output" }]).stream(
        request(assistants(0)),
      ),
    );
    expect(withCalls.events.at(-1)).toEqual({ type: "done", stopReason: "max_output" });
  });
});

describe("ScriptedModel's place in the script", () => {
  it("counts the assistant messages and, of those, the responses not interrupted", () => {
    const history: Message[] = [
      ...assistants(2),
      { role: "assistant", content: "cut", stopReason: "interrupted" },
      { role: "tool", toolCallId: "c", name: "t", content: "x", success: true },
    ];
    expect(scriptPosition(history)).toEqual({ stepIndex: 3, response: 2 });
    expect(scriptPosition([])).toEqual({ stepIndex: 0, response: 0 });
  });

  it("reads the history without copying it, at each model call", async () => {
    // A history whose copies throw: each step of a long session (50,000 messages) made two.
    const history = Object.assign(assistants(2), {
      filter(): never {
        throw new Error("the history was copied");
      },
      slice(): never {
        throw new Error("the history was copied");
      },
    });
    const { events, error } = await drain(
      model([{ text: "a" }, { text: "b" }, { text: "c" }]).stream(request(history)),
    );
    expect(error).toBeUndefined();
    expect(textOf(events)).toBe("c");
  });
});

describe("ScriptedModel faults", () => {
  it("connection: throws a retryable ProviderError before any event", async () => {
    const { events, error } = await drain(
      model([{ text: "never", fault: "connection" }]).stream(request(assistants(0))),
    );
    expect(events).toEqual([]);
    expect(error).toBeInstanceOf(ProviderError);
    expect((error as ProviderError).retryable).toBe(true);
  });

  it("stream_cut: streams part of the text, then breaks without done", async () => {
    const { events, error } = await drain(
      model([{ text: "abcdefgh", fault: "stream_cut" }]).stream(request(assistants(0))),
    );
    expect(error).toBeInstanceOf(ProviderError);
    expect(events.length).toBeGreaterThan(0);
    expect(events.every((e) => e.type === "text")).toBe(true);
    const streamed = textOf(events);
    expect("abcdefgh".startsWith(streamed)).toBe(true);
    expect(streamed.length).toBeLessThan("abcdefgh".length);
  });

  it("stream_cut inside a surrogate pair: through callModel the half pair is stored as U+FFFD", async () => {
    // "abc😀xyz" is 8 UTF-16 units in 4 pieces ("ab", "c\uD83D", "\uDE00x", "yz"): cut after 2.
    const step = await callModel(model([{ text: "abc😀xyz", fault: "stream_cut" }]), request(assistants(0)), {
      sleep: async () => {},
    });
    expect(step).toEqual({
      ok: true,
      attempts: 1,
      message: { role: "assistant", content: "abc\uFFFD", stopReason: "interrupted" },
      estimatedUsage: expect.any(Object),
    });
  });

  it("faultTimes: 2 faults the first two attempts at the step, then succeeds", async () => {
    const counter = memoryCounter();
    const m = model([{ text: "ok", fault: "connection", faultTimes: 2 }], counter);
    const results = [];
    for (let i = 0; i < 3; i++) results.push(await drain(m.stream(request(assistants(0)))));
    expect(results.map((r) => r.error instanceof ProviderError)).toEqual([true, true, false]);
    expect(textOf(results[2]!.events)).toBe("ok");
    expect(counter.counts.get("s1:0:0")).toBe(3);
  });

  it("without faultTimes faults every attempt and never counts", async () => {
    const counter = memoryCounter();
    const m = model([{ text: "ok", fault: "connection" }], counter);
    for (let i = 0; i < 4; i++) expect((await drain(m.stream(request(assistants(0))))).error).toBeDefined();
    expect(counter.counts.size).toBe(0);
  });

  it("counts faults per session and per step", async () => {
    const counter = memoryCounter();
    const m = model([{ text: "ok", fault: "connection", faultTimes: 1 }], counter);
    expect((await drain(m.stream(request(assistants(0), "s1")))).error).toBeDefined();
    expect((await drain(m.stream(request(assistants(0), "s2")))).error).toBeDefined();
    expect((await drain(m.stream(request(assistants(1), "s1")))).error).toBeDefined();
    expect((await drain(m.stream(request(assistants(0), "s1")))).error).toBeUndefined();
  });

  it("faultTimes counts the retries of a response a stream_cut left, also on a repeated last step", async () => {
    const counter = memoryCounter();
    const m = model([{ text: "abcdefgh", fault: "stream_cut", faultTimes: 1 }], counter);
    const history = assistants(0);
    const first = await drain(m.stream(request(history)));
    expect(first.error).toBeInstanceOf(ProviderError);
    // What a retry_response sends: the partial kept as `interrupted`, then the runtime's note.
    history.push({ role: "assistant", content: textOf(first.events), stopReason: "interrupted" });
    history.push({ role: "internal", content: "Your previous response was cut off; redo it." });
    const retry = await drain(m.stream(request(history)));
    expect(retry.error).toBeUndefined();
    expect(textOf(retry.events)).toBe("abcdefgh");
  });

  it("two faulty steps count their attempts apart (a cut step 0, then a failing step 1)", async () => {
    const counter = memoryCounter();
    const m = model(
      [
        { text: "abcdefgh", fault: "stream_cut", faultTimes: 1 },
        { text: "done", fault: "connection", faultTimes: 1 },
      ],
      counter,
    );
    const history = assistants(0);
    const first = await drain(m.stream(request(history)));
    expect(first.error).toBeInstanceOf(ProviderError);
    history.push({ role: "assistant", content: textOf(first.events), stopReason: "interrupted" });
    // The next attempt is step 1 (one assistant message in the history): its own first attempt fails.
    expect((await drain(m.stream(request(history)))).error).toBeInstanceOf(ProviderError);
    const third = await drain(m.stream(request(history)));
    expect(third.error).toBeUndefined();
    expect(textOf(third.events)).toBe("done");
  });

  it("uses the injected sleep for delayMs and honours its signal", async () => {
    const slept: number[] = [];
    const signals: AbortSignal[] = [];
    const controller = new AbortController();
    let clock = 0;
    const m = new ScriptedModel([{ text: "abcdefgh", delayMs: 400 }], {
      faults: memoryCounter(),
      sleep: async (ms, signal) => {
        slept.push(ms);
        signals.push(signal);
        clock += ms;
      },
      now: () => clock,
    });
    const { events } = await drain(m.stream(request(assistants(0), "s1", controller.signal)));
    expect(textOf(events)).toBe("abcdefgh");
    expect(slept[0]).toBe(200);
    expect(slept.reduce((a, b) => a + b, 0)).toBe(400);
    expect(signals.every((s) => s === controller.signal)).toBe(true);
  });

  it("with no injected sleep, a step's pauses share one abort listener, gone when the stream ends", async () => {
    // Each pause (one before the text, one before each of its four chunks) added and removed a
    // listener of its own on the request's signal: Node's EventTarget makes that slow.
    const controller = new AbortController();
    const added = { n: 0 };
    const add = controller.signal.addEventListener.bind(controller.signal);
    controller.signal.addEventListener = ((...args: Parameters<AbortSignal["addEventListener"]>) => {
      added.n++;
      add(...args);
    }) as AbortSignal["addEventListener"];
    const m = new ScriptedModel([{ text: "abcdefgh", delayMs: 200 }], { faults: memoryCounter() });
    const { events, error } = await drain(m.stream(request(assistants(0), "s1", controller.signal)));
    expect(error).toBeUndefined();
    expect(textOf(events)).toBe("abcdefgh");
    expect(added.n).toBe(1);
    expect(getEventListeners(controller.signal, "abort")).toHaveLength(0);
  });

  it("with no injected sleep, an abort during a pause ends the stream with the signal's reason", async () => {
    const controller = new AbortController();
    const m = new ScriptedModel([{ text: "abcdefgh", delayMs: 60_000 }], { faults: memoryCounter() });
    const stream = m.stream(request(assistants(0), "s1", controller.signal));
    const drained = drain(stream);
    // Aborted once the first pause has started (its listener is on the signal).
    while (getEventListeners(controller.signal, "abort").length === 0) await new Promise(setImmediate);
    const reason = new Error("cancelled");
    controller.abort(reason);
    const { events, error } = await drained;
    expect(events).toEqual([]);
    expect(error).toBe(reason);
    expect(getEventListeners(controller.signal, "abort")).toHaveLength(0);
  });

  it("keeps to the step's schedule when its timers fire late (a busy event loop)", async () => {
    // Every timer fires 30 ms late: the step takes its 400 ms plus one lateness, not plus one
    // per pause (five: before the text and before each of its four chunks).
    let clock = 0;
    const arrivals: number[] = [];
    const m = new ScriptedModel([{ text: "abcdefgh", delayMs: 400 }], {
      faults: memoryCounter(),
      sleep: async (ms) => {
        clock += ms + 30;
      },
      now: () => clock,
    });
    for await (const event of m.stream(request(assistants(0))))
      if (event.type === "text") arrivals.push(clock);
    expect(arrivals).toEqual([280, 330, 380, 430]);
    expect(clock).toBe(430);
  });

  it("streams at once what is overdue, and still stops when aborted", async () => {
    let clock = 0;
    const controller = new AbortController();
    const slept: number[] = [];
    const m = new ScriptedModel([{ text: "abcdefgh", delayMs: 400 }], {
      faults: memoryCounter(),
      sleep: async (ms) => {
        slept.push(ms);
        clock += 1_000;
      },
      now: () => clock,
    });
    const events: string[] = [];
    for await (const event of m.stream(request(assistants(0))))
      if (event.type === "text") events.push(event.delta);
    // The first pause ran a second over: every chunk was due, none waited.
    expect(slept).toEqual([200]);
    expect(events.join("")).toBe("abcdefgh");
    const aborted = m.stream(request(assistants(0), "s1", controller.signal))[Symbol.asyncIterator]();
    controller.abort(new Error("stop"));
    await expect(aborted.next()).rejects.toThrow("stop");
  });

  it("does not sleep without delayMs", async () => {
    const slept: number[] = [];
    const m = new ScriptedModel([{ text: "x" }], {
      faults: memoryCounter(),
      sleep: async (ms) => {
        slept.push(ms);
      },
    });
    await drain(m.stream(request(assistants(0))));
    expect(slept).toEqual([]);
  });
});

describe("ScriptedModel with the Redis fault counter", () => {
  let redis: Redis;
  const prefix = `t-scripted-${randomUUID().slice(0, 8)}`;
  beforeAll(() => {
    redis = new Redis(REDIS_URL, { maxRetriesPerRequest: 1 });
  });
  afterAll(async () => {
    const keys = await redis.keys(`${prefix}:*`);
    if (keys.length > 0) await redis.del(...keys);
    await redis.quit();
  });

  it("shares attempt counts across two instances (two workers)", async () => {
    const steps: ScriptedStep[] = [{ text: "recovered", fault: "connection", faultTimes: 2 }];
    const workerA = new ScriptedModel(steps, {
      faults: redisFaultCounter(redis, prefix),
      sleep: async () => {},
    });
    const workerB = new ScriptedModel(steps, {
      faults: redisFaultCounter(redis, prefix),
      sleep: async () => {},
    });
    const sessionId = randomUUID();
    const first = await drain(workerA.stream(request(assistants(0), sessionId)));
    const second = await drain(workerB.stream(request(assistants(0), sessionId)));
    const third = await drain(workerA.stream(request(assistants(0), sessionId)));
    expect([first, second, third].map((r) => r.error instanceof ProviderError)).toEqual([true, true, false]);
    expect(textOf(third.events)).toBe("recovered");
    const key = `${prefix}:scripted-faults:${sessionId}:0:0`;
    expect(await redis.get(key)).toBe("3");
    // The count expires eventually, so abandoned sessions leave nothing behind.
    expect(await redis.ttl(key)).toBeGreaterThan(0);
  });
});
