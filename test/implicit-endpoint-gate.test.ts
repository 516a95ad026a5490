/**
 * An endpoint's limits (contracts §15) hold for every MODEL whose requests go where the
 * endpoint sends them, with its key — not only for those that name it. Before, the gate applied
 * only to `{"endpoint": "NAME"}`: with `{"main": {"provider": "openai", "limits": …}}` declared
 * (OpenAI's own host, OPENAI_API_KEY), a tenant whose agent said just `{"provider": "openai",
 * "model": …}` reached the same account with the same key ungated — past `maxConcurrent`, past
 * requests per minute, past every other tenant's share, and a 429 it got paused nobody. So did a
 * raw `baseUrl` equal to a declared endpoint's. Now such a MODEL is gated under that endpoint.
 */
import { randomUUID } from "node:crypto";
import { Redis } from "ioredis";
import { afterAll, beforeAll, expect, it } from "vitest";
import type { ModelConfig } from "../src/shared/agent-config.js";
import { parseModelEndpoints } from "../src/shared/model-endpoints.js";
import { ProviderLimits } from "../src/shared/provider-limits.js";
import { CapacityWait, type EndpointGateDeps, type WaitLedger } from "../src/worker/endpoint-gate.js";
import { type CapacityDeps, withCapacityGate } from "../src/worker/hand-back.js";
import type { ModelProvider } from "../src/worker/models/provider.js";

const REDIS_URL = process.env.TEST_REDIS_URL ?? "redis://127.0.0.1:6379";
const prefix = `t-implicit-gate-${randomUUID().slice(0, 8)}`;
let redis: Redis;
let limits: ProviderLimits;

beforeAll(() => {
  redis = new Redis(REDIS_URL);
  limits = new ProviderLimits(redis, prefix, { maxWaitMs: 50 });
});
afterAll(async () => {
  const keys = await redis.keys(`${prefix}:*`);
  if (keys.length > 0) await redis.del(...keys);
  await redis.quit();
});

const endpoints = parseModelEndpoints(
  JSON.stringify({
    main: { provider: "openai", limits: { maxConcurrent: 1 } },
    local: { provider: "openai", baseUrl: "http://127.0.0.1:11434/v1", limits: { maxConcurrent: 1 } },
    team: { provider: "anthropic", apiKeyEnv: "TEAM_KEY", limits: { maxConcurrent: 1 } },
  }),
  { OPENAI_API_KEY: "sk-main", TEAM_KEY: "sk-team" },
);

/** A provider that answers at once: reaching it means the request went through the gate or around it. */
const answering = {
  async *stream() {
    yield { type: "done", stopReason: "end_turn", usage: { inputTokens: 1, outputTokens: 1 } };
  },
} as unknown as ModelProvider;

/** Whether a request of `config` is held back while another holds the one permit of `endpoint`. */
async function heldBack(config: ModelConfig, endpoint: string): Promise<boolean> {
  const other = await limits.acquire({
    endpoint,
    limits: endpoints.get(endpoint)!.limits!,
    tenant: "other",
    weight: 1,
    request: randomUUID(),
    estimatedTokens: 1,
  });
  expect(other.granted).toBe(true);
  const capacity = {
    waits: { handBack: async () => "handed_back" },
    gate: {
      limits,
      shares: new Map(),
      metrics: { endpointWait: { observe() {} }, modelRequests: { inc() {} } },
      sleep: async () => {},
    } as unknown as EndpointGateDeps,
    endpoints,
  } as unknown as CapacityDeps;
  const ledger: WaitLedger = { waitedMs: 0 };
  const run = { id: randomUUID(), tenant: "attacker" } as Parameters<typeof withCapacityGate>[2];
  const model = withCapacityGate(answering, config, run, ledger, capacity);
  try {
    for await (const _ of model.stream({ signal: new AbortController().signal } as never));
    return false;
  } catch (error) {
    if (error instanceof CapacityWait) return true;
    throw error;
  } finally {
    if (other.granted) await limits.release(endpoint, other.permit);
  }
}

it("a MODEL that names no endpoint is held to the endpoint with its host and key", async () => {
  expect(await heldBack({ provider: "openai", model: "gpt-4o-mini" }, "main")).toBe(true);
});

it("a raw baseUrl that is a declared endpoint's is held to its limits", async () => {
  expect(
    await heldBack({ provider: "openai", model: "llama3.1", baseUrl: "http://127.0.0.1:11434/v1" }, "local"),
  ).toBe(true);
  // The same server written otherwise: a query, another spelling of the address.
  for (const baseUrl of [
    "http://127.0.0.1:11434/v1/",
    "http://127.0.0.1:11434/v1?x=1",
    "http://127.1:11434/v1",
  ])
    expect(await heldBack({ provider: "openai", model: "llama3.1", baseUrl }, "local"), baseUrl).toBe(true);
});

it("a MODEL that goes elsewhere, or with another key, is not", async () => {
  // Anthropic's host with ANTHROPIC_API_KEY: `team` sends TEAM_KEY there, another account.
  expect(await heldBack({ provider: "anthropic", model: "claude-sonnet-4-5" }, "team")).toBe(false);
  expect(
    await heldBack({ provider: "openai", model: "llama3.1", baseUrl: "http://127.0.0.1:8000/v1" }, "local"),
  ).toBe(false);
});
