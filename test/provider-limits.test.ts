/**
 * Provider limits (contracts §15) at the Redis level: the Lua state every worker shares, on a
 * real Redis — GCRA pacing, the fleet-wide pause after a 429, concurrency permits that expire
 * when their holder dies, tenants' calendars — and the `limits` field's validation.
 */
import { randomUUID } from "node:crypto";
import { Redis } from "ioredis";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { parseModelEndpoints } from "../src/shared/model-endpoints.js";
import { type EndpointLimits, ProviderLimits, parseTenantShares } from "../src/shared/provider-limits.js";
import {
  CapacityWait,
  type EndpointGateDeps,
  gatedModel,
  type WaitLedger,
} from "../src/worker/endpoint-gate.js";
import { type CapacityDeps, handBack } from "../src/worker/hand-back.js";

const REDIS_URL = process.env.TEST_REDIS_URL ?? "redis://127.0.0.1:6379";

describe("FLEET_MODEL_ENDPOINTS limits and FLEET_TENANT_SHARES", () => {
  it("accepts limits and refuses bad ones with a one-line error naming the field", () => {
    const endpoints = parseModelEndpoints(
      JSON.stringify({
        local: {
          provider: "openai",
          baseUrl: "http://127.0.0.1:1/v1",
          limits: { requestsPerMinute: 600, maxConcurrent: 4 },
        },
        plain: { provider: "openai", baseUrl: "http://127.0.0.1:2/v1" },
      }),
      {},
    );
    expect(endpoints.get("local")?.limits).toEqual({ requestsPerMinute: 600, maxConcurrent: 4 });
    expect(endpoints.get("plain")?.limits).toBeUndefined();
    const bad = (limits: unknown) => () =>
      parseModelEndpoints(JSON.stringify({ local: { provider: "openai", limits } }), {});
    expect(bad({ requestsPerMinute: 0 })).toThrow(
      /^FLEET_MODEL_ENDPOINTS\.local\.limits\.requestsPerMinute: must be a positive integer$/,
    );
    expect(bad({ tokensPerMinute: 1.5 })).toThrow(/limits\.tokensPerMinute: must be a positive integer/);
    expect(bad({ maxConcurent: 2 })).toThrow(/^FLEET_MODEL_ENDPOINTS\.local\.limits: .*maxConcurent/);
    expect(bad({ maxConcurrent: "2" })).toThrow(/limits\.maxConcurrent: must be a positive integer/);
    for (const error of [bad({ requestsPerMinute: -1 }), bad({ maxConcurent: 2 })])
      expect(() => error()).toThrow(/^[^\n]+$/);
  });

  it("parses tenant shares; a tenant not named weighs 1", () => {
    expect(parseTenantShares('{"big": 1, "small": 3}')).toEqual(
      new Map([
        ["big", 1],
        ["small", 3],
      ]),
    );
    expect(parseTenantShares(undefined).size).toBe(0);
    expect(() => parseTenantShares('{"a": 0}')).toThrow(/^FLEET_TENANT_SHARES\.a: must be a number above 0/);
    expect(() => parseTenantShares("[1]")).toThrow(/^FLEET_TENANT_SHARES: must be a JSON object/);
  });
});

describe("ProviderLimits on Redis", () => {
  let redis: Redis;
  const prefix = `t-limits-${randomUUID().slice(0, 8)}`;
  beforeAll(() => {
    redis = new Redis(REDIS_URL, { lazyConnect: false });
  });
  afterAll(async () => {
    const keys = await redis.keys(`${prefix}:*`);
    if (keys.length > 0) await redis.del(...keys);
    await redis.quit();
  });

  const ask = (
    limits: ProviderLimits,
    endpoint: string,
    endpointLimits: EndpointLimits,
    tenant = "t",
    request: string = randomUUID(),
  ) => limits.acquire({ endpoint, limits: endpointLimits, tenant, weight: 1, request, estimatedTokens: 100 });

  it("paces requests per minute across callers (GCRA) and denies beyond the longest wait", async () => {
    const limits = new ProviderLimits(redis, prefix, { maxWaitMs: 1_000 });
    const other = new ProviderLimits(redis, prefix, { maxWaitMs: 1_000 }); // another worker
    const rpm = { requestsPerMinute: 600 }; // one per 100 ms
    const results = [];
    // Each slot as seen from here (the ask's start plus the wait Redis answered), and how long
    // the ask took: Redis measured its wait from some moment within that time.
    const slots: number[] = [];
    const took: number[] = [];
    for (let i = 0; i < 15; i++) {
      const asked = Date.now();
      const r = await ask(i % 2 ? other : limits, "gcra", rpm);
      results.push(r);
      if (r.granted) {
        slots.push(asked + r.waitMs);
        took.push(Date.now() - asked);
      }
    }
    const granted = results.filter((r) => r.granted);
    // Slots at 0, 100, ..., 1000 ms: 11 within the longest wait, the rest told to come back.
    expect(granted.length).toBeGreaterThanOrEqual(10);
    expect(granted.length).toBeLessThanOrEqual(12);
    // Slots 100 ms apart: seen from here, a slot is early by as much as its ask took (on a
    // loaded machine, tens of ms: 86 ms apart was seen against a fixed 90).
    for (let i = 1; i < slots.length; i++)
      expect(slots[i]! - slots[i - 1]! + took[i]!).toBeGreaterThanOrEqual(98);
    expect(slots.at(-1)! - slots[0]! + took.at(-1)!).toBeGreaterThanOrEqual(100 * (slots.length - 1) - 2);
    const denied = results.filter((r) => !r.granted);
    expect(denied.length).toBeGreaterThan(0);
    for (const d of denied) if (!d.granted) expect(d.retryInMs).toBeGreaterThan(0);
  });

  it("a 429 pauses the endpoint for every caller for the time it asked", async () => {
    const limits = new ProviderLimits(redis, prefix, { maxWaitMs: 500 });
    expect((await ask(limits, "paused", {})).granted).toBe(true);
    await limits.pause("paused", 2_000);
    const after = await ask(new ProviderLimits(redis, prefix, { maxWaitMs: 500 }), "paused", {});
    expect(after.granted).toBe(false);
    if (!after.granted) expect(after.retryInMs).toBeGreaterThan(1_000);
    // A shorter pause never shortens a longer one.
    await limits.pause("paused", 100);
    expect((await ask(limits, "paused", {})).granted).toBe(false);
  });

  it("concurrency permits are released, and expire when their holder dies", async () => {
    const limits = new ProviderLimits(redis, prefix, { maxWaitMs: 200, permitTtlMs: 400 });
    const conc = { maxConcurrent: 2 };
    const a = await ask(limits, "conc", conc);
    const b = await ask(limits, "conc", conc);
    expect(a.granted && b.granted).toBe(true);
    const c = await ask(limits, "conc", conc);
    expect(c).toMatchObject({ granted: false, reason: "concurrency" });
    if (a.granted) await limits.release("conc", a.permit);
    expect((await ask(limits, "conc", conc)).granted).toBe(true);
    // Nobody renews: both permits (b and the last one) expire, as a SIGKILLed worker's would.
    expect(await limits.inUse("conc")).toBe(2);
    await new Promise((r) => setTimeout(r, 500));
    expect(await limits.inUse("conc")).toBe(0);
  });

  it("a tenant without a backlog gets a slot at once, behind another tenant's big backlog", async () => {
    const limits = new ProviderLimits(redis, prefix, { maxWaitMs: 1_000 });
    const rpm = { requestsPerMinute: 60 }; // one per second
    const big = [];
    for (let i = 0; i < 30; i++) big.push(await ask(limits, "shares", rpm, "big", `big-${i}`));
    const bigDenied = big.filter((r) => !r.granted);
    expect(bigDenied.length).toBeGreaterThan(25);
    // The big tenant's waiting requests are spread over its calendar, one second apart.
    const last = bigDenied.at(-1);
    // Retry times are relative to each ask: compare when each would come back, not the deltas.
    const lastAskedAt = Date.now();
    expect(last && !last.granted && last.retryInMs).toBeGreaterThan(20_000);
    // The small tenant's request is eligible at once: it comes back when the next slot is
    // within reach (not after the big tenant's 30 s calendar) and is granted then.
    let small = await ask(limits, "shares", rpm, "small", "small-1");
    if (!small.granted) {
      expect(small.retryInMs).toBeLessThanOrEqual(1_500);
      await new Promise((r) => setTimeout(r, small.granted ? 0 : small.retryInMs));
      small = await ask(limits, "shares", rpm, "small", "small-1");
    }
    expect(small.granted).toBe(true);
    if (small.granted) expect(small.waitMs).toBeLessThanOrEqual(1_000);
    // A newcomer of the big tenant joins the end of its calendar.
    const lateAskedAt = Date.now();
    const late = await ask(limits, "shares", rpm, "big", "big-late");
    expect(late.granted).toBe(false);
    // It comes back after the last one queued before it (its slot is one interval later; the
    // 50 ms allows for the two clocks read around the asks).
    if (!late.granted && last && !last.granted)
      expect(lateAskedAt + late.retryInMs).toBeGreaterThan(lastAskedAt + last.retryInMs - 50);
  });

  it("a permit that frees while a tenant below its share of maxConcurrent waits is kept for it", async () => {
    const limits = new ProviderLimits(redis, prefix, { maxWaitMs: 1_000 });
    const conc = { maxConcurrent: 2 };
    const a = await ask(limits, "conc-share", conc, "big", "big-1");
    const b = await ask(limits, "conc-share", conc, "big", "big-2");
    expect(a.granted && b.granted).toBe(true);
    // Both permits held by big: big's third request and small's first wait.
    expect((await ask(limits, "conc-share", conc, "big", "big-3")).granted).toBe(false);
    expect((await ask(limits, "conc-share", conc, "small", "small-1")).granted).toBe(false);
    if (a.granted) await limits.release("conc-share", a.permit);
    // One permit is free. Big already holds its share (1 of 2): the permit is small's.
    expect((await ask(limits, "conc-share", conc, "big", "big-3")).granted).toBe(false);
    const small = await ask(limits, "conc-share", conc, "small", "small-1");
    expect(small.granted).toBe(true);
    // Small waits for nothing more: the next permit that frees is big's again.
    if (b.granted) await limits.release("conc-share", b.permit);
    expect((await ask(limits, "conc-share", conc, "big", "big-3")).granted).toBe(true);
    // A tenant alone uses every permit.
    if (small.granted) await limits.release("conc-share", small.permit);
    expect((await ask(limits, "conc-share", conc, "big", "big-4")).granted).toBe(true);
  });

  it("a tenant counts as waiting exactly while a request of its waits: granted, forgotten or its place long past", async () => {
    const limits = new ProviderLimits(redis, prefix, { maxWaitMs: 5_000 });
    const conc = { maxConcurrent: 2 };
    const a = await ask(limits, "exact", conc, "big", "big-1");
    const b = await ask(limits, "exact", conc, "big", "big-2");
    expect(a.granted && b.granted).toBe(true);
    for (const request of ["small-1", "small-2", "small-3"])
      expect((await ask(limits, "exact", conc, "small", request)).granted).toBe(false);
    expect(await limits.waiting("exact")).toEqual(new Map([["small", 3]]));
    // Asking again changes nothing: one request waits once.
    expect((await ask(limits, "exact", conc, "small", "small-1")).granted).toBe(false);
    expect(await limits.waiting("exact")).toEqual(new Map([["small", 3]]));
    // Two of small's requests give up (their runs were cancelled), one is granted: small
    // waits no more, and a permit that frees is big's at once, not kept for small.
    await limits.forget("exact", "small", ["small-2", "small-3"]);
    if (a.granted) await limits.release("exact", a.permit);
    const small = await ask(limits, "exact", conc, "small", "small-1");
    expect(small.granted).toBe(true);
    expect(await limits.waiting("exact")).toEqual(new Map());
    if (b.granted) await limits.release("exact", b.permit);
    expect((await ask(limits, "exact", conc, "big", "big-3")).granted).toBe(true);
  });

  it("a request whose session was cancelled before its run could be handed back waits no more", async () => {
    const limits = new ProviderLimits(redis, prefix, { maxWaitMs: 10_000 });
    const conc = { maxConcurrent: 1 };
    expect((await ask(limits, "handback", conc, "big", "big-1")).granted).toBe(true);
    expect((await ask(limits, "handback", conc, "small", "run-1")).granted).toBe(false);
    expect(await limits.waiting("handback")).toEqual(new Map([["small", 1]]));
    const capacity = {
      // The session was cancelled while the run was running: it is not handed back.
      waits: { handBack: async () => "cancelled" as const },
      gate: { limits } as unknown as EndpointGateDeps,
      endpoints: new Map(),
    } as CapacityDeps;
    const ledger: WaitLedger = { waitedMs: 0, waitingOn: "handback" };
    const answer = handBack(
      new CapacityWait("handback", 5_000, Date.now()),
      {
        fence: { sessionId: "s-1", epoch: 1 },
        run: { id: "run-1", tenant: "small" } as Parameters<typeof handBack>[1]["run"],
        committed: [],
        previous: null,
        ledger,
        reservedModelCall: false,
      },
      capacity,
    );
    // The caller ends the run `cancelled`: nothing left for it to forget.
    expect(await answer).toBe("cancelled");
    expect(ledger.waitingOn).toBeUndefined();
    expect(await limits.waiting("handback")).toEqual(new Map());
  });

  it("a request whose wait in the worker is aborted (its run cancelled) waits no more", async () => {
    const limits = new ProviderLimits(redis, prefix, { maxWaitMs: 10_000 });
    const conc = { maxConcurrent: 1 };
    expect((await ask(limits, "gate-abort", conc, "big", "big-1")).granted).toBe(true);
    const deps = {
      limits,
      shares: new Map(),
      metrics: { endpointWait: { observe() {} }, modelRequests: { inc() {} } },
      // The run is cancelled while its request sleeps until its place.
      sleep: async () => {
        expect(await limits.waiting("gate-abort")).toEqual(new Map([["small", 1]]));
        throw new Error("session cancelled");
      },
    } as unknown as EndpointGateDeps;
    const model = gatedModel(
      { stream: async function* () {} } as unknown as Parameters<typeof gatedModel>[0],
      { endpoint: "gate-abort", limits: conc, tenant: "small", request: "run-2", ledger: { waitedMs: 0 } },
      deps,
    );
    const request = { signal: new AbortController().signal } as Parameters<typeof model.stream>[0];
    await expect(model.stream(request)[Symbol.asyncIterator]().next()).rejects.toThrow("session cancelled");
    expect(await limits.waiting("gate-abort")).toEqual(new Map());
  });

  it("one request holds at most a minute of tokensPerMinute: a huge history refused, or absurd usage, keeps no other tenant out for hours", async () => {
    // Before: the gate reserved the request's whole estimate (here about 100 minutes of the
    // endpoint's tokens) and gave none of it back when the provider refused the request, so
    // every other tenant's request was told to come back in 100 minutes; a reported usage of
    // 1e12 tokens put the endpoint out of use for ~2,000 years.
    const tpm = { tokensPerMinute: 1_000 };
    const limits = new ProviderLimits(redis, prefix, { maxWaitMs: 1_000 });
    const deps = {
      limits,
      shares: new Map(),
      metrics: { endpointWait: { observe() {} }, modelRequests: { inc() {} } },
      sleep: async () => {},
    } as unknown as EndpointGateDeps;
    // About 100,000 tokens as estimated (3 bytes a token).
    const history = [{ role: "user" as const, content: "x".repeat(300_000) }];
    const answers = {
      // biome-ignore lint/correctness/useYield: the provider refuses the request before any event
      refused: async function* () {
        throw new Error("HTTP 400: this model's maximum context length is 128000 tokens");
      },
      absurd: async function* () {
        yield { type: "done", stopReason: "end_turn", usage: { inputTokens: 1e12, outputTokens: 0 } };
      },
    };
    for (const [how, stream] of Object.entries(answers)) {
      const endpoint = `tpm-${how}`;
      const model = gatedModel(
        { stream } as unknown as Parameters<typeof gatedModel>[0],
        { endpoint, limits: tpm, tenant: "big", request: `big-${how}`, ledger: { waitedMs: 0 } },
        deps,
      );
      const request = { history, signal: new AbortController().signal } as unknown as Parameters<
        typeof model.stream
      >[0];
      const events = model.stream(request)[Symbol.asyncIterator]();
      if (how === "refused") await expect(events.next()).rejects.toThrow("maximum context length");
      else while (!(await events.next()).done);
      const small = await limits.acquire({
        endpoint,
        limits: tpm,
        tenant: "small",
        weight: 1,
        request: `small-${how}`,
        estimatedTokens: 10,
      });
      // Its place comes within about a minute (the tokens of one minute), not hours later.
      expect(small.granted ? small.waitMs : small.retryInMs, how).toBeLessThanOrEqual(61_000);
    }
  });

  it("a waiter that gives up frees its tenant's share at once; one that never asks again, maxWait after its place", async () => {
    const conc = { maxConcurrent: 2 };
    for (const how of ["forgotten", "abandoned"] as const) {
      const endpoint = `gone-${how}`;
      const limits = new ProviderLimits(redis, prefix, { maxWaitMs: how === "forgotten" ? 10_000 : 400 });
      const a = await ask(limits, endpoint, conc, "big", "big-1");
      const b = await ask(limits, endpoint, conc, "big", "big-2");
      expect(a.granted && b.granted).toBe(true);
      const small = await ask(limits, endpoint, conc, "small", "small-1");
      expect(small).toMatchObject({ granted: false, reason: "concurrency" });
      if (a.granted) await limits.release(endpoint, a.permit);
      // Small waits: the free permit is kept for it.
      expect((await ask(limits, endpoint, conc, "big", "big-3")).granted).toBe(false);
      if (how === "forgotten") await limits.forget(endpoint, "small", ["small-1"]);
      // Its worker was killed: nobody forgets it, it is gone once its place is maxWait past.
      else await new Promise((r) => setTimeout(r, (small.granted ? 0 : small.retryInMs) + 500));
      expect((await ask(limits, endpoint, conc, "big", "big-3")).granted).toBe(true);
      expect((await limits.waiting(endpoint)).get("small")).toBeUndefined();
    }
  });
});
