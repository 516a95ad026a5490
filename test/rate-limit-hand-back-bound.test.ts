/**
 * A gated endpoint (contracts §15) that answers every request `429` with a `retry-after` of a
 * century: its fleet-wide pause is capped (`maxPauseMs`, 10 min), and so must be the hand-back
 * after the call's free asks (MAX_RATE_LIMITED). That hand-back took the last answer's
 * `retry-after` as it came: with in-worker waits allowed as long as the pause
 * (FLEET_ENDPOINT_MAX_WAIT_MS ≥ 10 min, or here a short `maxPauseMs`), the job was put back in
 * the delayed set for 100 years and the session never came back. Now it waits the pause the
 * gate applied. Real Redis limits, the real OpenAI SDK, a local server counting requests.
 */
import { randomUUID } from "node:crypto";
import { Redis } from "ioredis";
import { afterAll, beforeAll, expect, it } from "vitest";
import { ProviderLimits } from "../src/shared/provider-limits.js";
import { callModel, MAX_RATE_LIMITED } from "../src/worker/call-model.js";
import { CapacityWait, type EndpointGateDeps, gatedModel } from "../src/worker/endpoint-gate.js";
import { type FakeOpenAI, startFakeOpenAI } from "./support/fake-openai.js";
import { gpt, req } from "./support/model-steps.js";

const REDIS_URL = process.env.TEST_REDIS_URL ?? "redis://127.0.0.1:6379";
const CENTURY_S = 100 * 365 * 24 * 3600;
const MAX_PAUSE_MS = 20;

let redis: Redis;
let server: FakeOpenAI;
const prefix = `t-handback-${randomUUID().slice(0, 8)}`;

beforeAll(async () => {
  redis = new Redis(REDIS_URL, { lazyConnect: true, maxRetriesPerRequest: 1 });
  await redis.connect();
  server = await startFakeOpenAI([], {
    respond: () => ({
      status: 429,
      headers: { "retry-after": String(CENTURY_S) },
      errorType: "rate_limit_error",
      errorCode: "rate_limit_exceeded",
    }),
  });
});
afterAll(async () => {
  const keys = await redis.keys(`${prefix}:*`);
  if (keys.length > 0) await redis.del(...keys);
  redis.disconnect();
  await server.close();
});

it("a retry-after of a century hands the job back for the capped pause, not for a century", async () => {
  const limits = new ProviderLimits(redis, prefix, { maxWaitMs: 60_000, maxPauseMs: MAX_PAUSE_MS });
  const sleep = (ms: number) => new Promise<void>((resolve) => setTimeout(resolve, ms));
  const deps = {
    limits,
    shares: new Map(),
    metrics: { endpointWait: { observe() {} }, modelRequests: { inc() {} } },
    sleep,
  } as unknown as EndpointGateDeps;
  const model = gatedModel(
    gpt("chat", `${server.url}`),
    {
      endpoint: "slow",
      limits: { requestsPerMinute: 600_000 },
      tenant: "t",
      request: "run-1",
      ledger: { waitedMs: 0 },
    },
    deps,
  );
  const thrown = await callModel(model, req([{ role: "user", content: "hi" }]), { sleep }).catch(
    (e: unknown) => e,
  );
  expect(thrown).toBeInstanceOf(CapacityWait);
  expect(server.requests).toHaveLength(MAX_RATE_LIMITED + 1);
  // At least the hand-back's floor (1 s), at most the pause the gate may apply.
  expect((thrown as CapacityWait).retryInMs).toBeLessThanOrEqual(Math.max(1_000, MAX_PAUSE_MS));
});
