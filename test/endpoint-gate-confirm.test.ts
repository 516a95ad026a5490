/**
 * A granted request is checked again right before it is sent (contracts §15), on a real Redis
 * with two workers' limits on two connections. A grant is Redis's answer at one moment; the
 * worker acts on it later — after the grant's wait, or after however long a busy event loop
 * takes to run the continuation. Here the worker that was granted is held between the grant
 * and the send (as a loaded process holds it) until the other worker's 429 has been recorded,
 * or until its concurrency permit has lapsed: deterministic, whatever the machine's load.
 */
import { randomUUID } from "node:crypto";
import { Redis } from "ioredis";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { createMetrics } from "../src/shared/metrics.js";
import { type Acquired, type EndpointLimits, ProviderLimits } from "../src/shared/provider-limits.js";
import { callModel } from "../src/worker/call-model.js";
import { CapacityWait, EndpointRateLimited, gatedModel } from "../src/worker/endpoint-gate.js";
import { type ModelEvent, type ModelProvider, ProviderError } from "../src/worker/models/provider.js";
import { waitFor } from "./support/fleet-env.js";

const REDIS_URL = process.env.TEST_REDIS_URL ?? "redis://127.0.0.1:6379";

const done: ModelEvent[] = [
  { type: "text", delta: "hi" },
  { type: "done", stopReason: "end_turn", usage: { inputTokens: 3, outputTokens: 1 } },
];
const request = () => ({ sessionId: "s", history: [], tools: [], signal: new AbortController().signal });

/** A provider that records what it was sent; `answer` decides each response. */
function provider(answer: () => Promise<ModelEvent[]>): ModelProvider & { sent: number } {
  const p = {
    sent: 0,
    async *stream() {
      p.sent++;
      for (const event of await answer()) yield event;
    },
  };
  return p;
}

/**
 * `limits` whose first grant is held between Redis's answer and the gate acting on it, until
 * `release()`: `granted` resolves once that grant was made in Redis.
 */
function holdFirstGrant(limits: ProviderLimits) {
  let onGranted!: () => void;
  let release!: () => void;
  const granted = new Promise<void>((resolve) => {
    onGranted = resolve;
  });
  const released = new Promise<void>((resolve) => {
    release = resolve;
  });
  let held = false;
  const holding = Object.create(limits) as ProviderLimits;
  holding.acquire = async (input): Promise<Acquired> => {
    const asked = await limits.acquire(input);
    if (asked.granted && !held) {
      held = true;
      onGranted();
      await released;
    }
    return asked;
  };
  return { limits: holding, granted, release };
}

describe("a granted request is checked again right before it is sent", () => {
  let redisA: Redis;
  let redisB: Redis;
  const prefix = `t-confirm-${randomUUID().slice(0, 8)}`;
  beforeAll(() => {
    redisA = new Redis(REDIS_URL);
    redisB = new Redis(REDIS_URL);
  });
  afterAll(async () => {
    const keys = await redisA.keys(`${prefix}:*`);
    if (keys.length > 0) await redisA.del(...keys);
    await redisA.quit();
    await redisB.quit();
  });

  const gate = (limits: ProviderLimits, model: ModelProvider, endpoint: string, declared?: EndpointLimits) =>
    gatedModel(
      model,
      { endpoint, limits: declared, tenant: "t", request: randomUUID(), ledger: { waitedMs: 0 } },
      { limits, shares: new Map(), metrics: createMetrics("test"), sleep: async () => {} },
    );

  it("a 429 another worker recorded after the grant: the granted request is not sent, its job is handed back", async () => {
    const a = holdFirstGrant(new ProviderLimits(redisA, prefix, { maxWaitMs: 1_000 }));
    const b = new ProviderLimits(redisB, prefix, { maxWaitMs: 1_000 });
    const sentByA = provider(async () => done);
    const callA = callModel(gate(a.limits, sentByA, "paused"), request(), { sleep: async () => {} });
    // Worker A was granted the endpoint (nothing paused it yet), and is held up before sending.
    await a.granted;
    // Worker B's request is answered 429 retry-after 5 s; B records the pause for every worker.
    const tooMany = new ProviderError("openai: HTTP 429", true, 5_000, { status: 429 });
    const modelB = gate(
      b,
      provider(async () => {
        throw tooMany;
      }),
      "paused",
    );
    const sentByB = (async () => {
      for await (const _ of modelB.stream(request()));
    })();
    await expect(sentByB).rejects.toBeInstanceOf(EndpointRateLimited);
    // A goes on: the pause is known, so A starts no request; its job is handed back for it.
    a.release();
    const handedBack = await callA.then(
      () => undefined,
      (error: unknown) => error,
    );
    expect(handedBack).toBeInstanceOf(CapacityWait);
    // For what is left of the pause: beyond the longest wait in the worker (1 s).
    expect(handedBack).toMatchObject({ endpoint: "paused" });
    expect((handedBack as CapacityWait).retryInMs).toBeGreaterThan(1_000);
    expect(sentByA.sent).toBe(0);
  });

  it("a concurrency permit that lapsed while its holder was held up: it is not sent beside the permit's new holder", async () => {
    // A's permits live 300 ms unless renewed; B's a minute (B's renewals play no part).
    const a = holdFirstGrant(new ProviderLimits(redisA, prefix, { maxWaitMs: 1_000, permitTtlMs: 300 }));
    const b = new ProviderLimits(redisB, prefix, { maxWaitMs: 1_000, permitTtlMs: 60_000 });
    const one = { maxConcurrent: 1 };
    const sentByA = provider(async () => done);
    const callA = callModel(gate(a.limits, sentByA, "conc", one), request(), { sleep: async () => {} });
    await a.granted;
    // A's permit lapses while A is held up (as a dead worker's would); B takes the endpoint.
    await waitFor(async () => (await b.inUse("conc")) === 0, 10_000, "A's permit to lapse");
    let finishB!: () => void;
    const bAnswers = new Promise<void>((resolve) => {
      finishB = resolve;
    });
    const sentByB = provider(async () => {
      await bAnswers;
      return done;
    });
    const callB = callModel(gate(b, sentByB, "conc", one), request(), { sleep: async () => {} });
    await waitFor(() => sentByB.sent === 1, 10_000, "B's request to be sent");
    // A goes on: its permit is gone, and the endpoint's one permit is B's. A sends nothing.
    a.release();
    await expect(callA).rejects.toBeInstanceOf(CapacityWait);
    expect(sentByA.sent).toBe(0);
    expect(await b.inUse("conc")).toBe(1);
    finishB();
    expect(await callB).toMatchObject({ ok: true });
    expect(await b.inUse("conc")).toBe(0);
  });
});
