/**
 * The layers every run's model stream goes through (the provider error log, the text deltas):
 * each event passed on as it comes, in few microtask turns; an early stop reaching the
 * provider's stream; a failure logged once and passed on.
 */
import { createHook } from "node:async_hooks";
import { describe, expect, it } from "vitest";
import type { SessionEventLog } from "../src/shared/session-event-log.js";
import { withProviderErrorLog } from "../src/worker/models/logged-provider.js";
import type { ModelEvent, ModelProvider, ModelRequest } from "../src/worker/models/provider.js";
import { withDeltas } from "../src/worker/run-events.js";

const request = (signal = new AbortController().signal): ModelRequest => ({
  sessionId: "s1",
  history: [],
  tools: [],
  signal,
});

function layered(inner: ModelProvider, deltas: string[] = [], warned: unknown[] = []): ModelProvider {
  const events = {
    enabled: true,
    delta: (runId: string, text: string) => deltas.push(`${runId}:${text}`),
  } as unknown as SessionEventLog;
  const log = { warn: (fields: unknown) => warned.push(fields) };
  return withDeltas(withProviderErrorLog(inner, log as never, { runId: "r1" }), events, "r1");
}

const TEXT: ModelEvent[] = [
  { type: "text", delta: "a" },
  { type: "text", delta: "b" },
  { type: "done", stopReason: "end_turn" },
];

describe("the model stream's layers", () => {
  it("pass every event on in order, each text delta told before the event is", async () => {
    const deltas: string[] = [];
    const seen: string[] = [];
    const model = layered(
      {
        async *stream() {
          yield* TEXT;
        },
      },
      deltas,
    );
    for await (const event of model.stream(request())) {
      seen.push(event.type === "text" ? `text ${event.delta} after ${deltas.length} deltas` : event.type);
    }
    expect(seen).toEqual(["text a after 1 deltas", "text b after 2 deltas", "done"]);
    expect(deltas).toEqual(["r1:a", "r1:b"]);
  });

  it("open the provider's stream only when the first event is asked for", async () => {
    let opened = 0;
    const model = layered({
      async *stream() {
        opened++;
        yield* TEXT;
      },
    });
    const stream = model.stream(request())[Symbol.asyncIterator]();
    expect(opened).toBe(0);
    await stream.next();
    expect(opened).toBe(1);
  });

  it("close the provider's stream when the consumer stops early", async () => {
    let closed = false;
    const model = layered({
      async *stream() {
        try {
          yield* TEXT;
        } finally {
          closed = true;
        }
      },
    });
    for await (const event of model.stream(request())) if (event.type === "text") break;
    expect(closed).toBe(true);
  });

  it("log a provider's failure once and pass it on; nothing after it", async () => {
    const failure = new Error("boom");
    const warned: unknown[] = [];
    const model = layered(
      {
        async *stream() {
          yield TEXT[0]!;
          throw failure;
        },
      },
      [],
      warned,
    );
    const stream = model.stream(request())[Symbol.asyncIterator]();
    expect((await stream.next()).done).toBe(false);
    await expect(stream.next()).rejects.toBe(failure);
    expect(await stream.next()).toEqual({ done: true, value: undefined });
    expect(warned).toHaveLength(1);
    // A failure the run caused itself (its signal aborted) is not a provider error.
    const controller = new AbortController();
    controller.abort();
    const cancelled = model.stream(request(controller.signal))[Symbol.asyncIterator]();
    await cancelled.next();
    await expect(cancelled.next()).rejects.toBe(failure);
    expect(warned).toHaveLength(1);
  });

  it("make at most one promise per event and layer", async () => {
    // A provider whose events are ready at once (iterator results already resolved): the
    // promises made while the consumer reads them are the layers' and its own `for await`'s.
    // Two `async *` layers re-yielding each event made 6 promises an event; the pass-throughs
    // make 2, one per layer.
    const EVENTS = 50;
    const ready: ModelProvider = {
      stream: () => {
        let n = 0;
        const result = (): IteratorResult<ModelEvent> =>
          n++ < EVENTS ? { done: false, value: TEXT[0]! } : { done: true, value: undefined };
        return { [Symbol.asyncIterator]: () => ({ next: () => Promise.resolve(result()) }) };
      },
    };
    const model = layered(ready);
    const count = async (provider: ModelProvider) => {
      let promises = 0;
      const hook = createHook({
        init: (_id, type) => {
          if (type === "PROMISE") promises++;
        },
      }).enable();
      let events = 0;
      try {
        for await (const _ of provider.stream(request())) events++;
      } finally {
        hook.disable();
      }
      expect(events).toBe(EVENTS);
      return promises;
    };
    const bare = await count(ready);
    const wrapped = await count(model);
    expect((wrapped - bare) / EVENTS).toBeLessThanOrEqual(2);
  });
});
