/**
 * Usage a provider reports that no provider could mean (contracts §12: nothing a model sends
 * can make an append fail; `agent.budget` holds): counts past Postgres's bigint (`1e19`,
 * `1e308`) and negative counts, through the real API, a real worker process and local fake
 * OpenAI-compatible and Anthropic servers.
 *
 * Before: a usage chunk of `1e308` tokens made the step's append fail (`tokens_used` became
 * `Infinity`, "invalid input syntax for type bigint"), so the model's answer was dropped and
 * the session parked `storage_rejected` after one call; `1e19` the same ("out of range for
 * type bigint"). A negative count was taken as 0 tokens, so a model looping on tool calls
 * never reached `budget.maxTokens` and ran to `maxTurns`. And `budget.maxModelCalls` counted
 * a step, not the requests of its retries.
 */
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import type { FleetClient } from "../src/producer/client.js";
import { MAX_REPORTED_TOKENS } from "../src/shared/usage.js";
import { type FakeAnthropic, startFakeAnthropic } from "./support/fake-anthropic.js";
import { type FakeOpenAI, type FakeResponse, startFakeOpenAI } from "./support/fake-openai.js";
import { createFleetEnv, type FleetEnv, waitFor } from "./support/fleet-env.js";

describe("absurd and negative usage from a provider", () => {
  let fleet: FleetEnv;
  let client: FleetClient;
  const openais: FakeOpenAI[] = [];
  let anthropic: FakeAnthropic;

  beforeAll(async () => {
    fleet = await createFleetEnv("usagebounds", { env: { FLEET_ALLOWED_BASE_URLS: "http://127.0.0.1" } });
    ({ client } = await fleet.startApi());
    await fleet.spawnWorker();
    anthropic = await startFakeAnthropic();
  });
  afterAll(async () => {
    for (const fake of openais) await fake.close();
    await anthropic?.close();
    await fleet?.close();
  });

  async function openai(respond: () => FakeResponse): Promise<FakeOpenAI> {
    const fake = await startFakeOpenAI([], { respond });
    openais.push(fake);
    return fake;
  }

  async function terminal(id: string) {
    let last = await client.getSession(id);
    await waitFor(
      async () => {
        last = await client.getSession(id);
        return last.status === "completed" || last.status === "parked";
      },
      20_000,
      `session ${id} to end`,
    );
    return last;
  }

  for (const huge of [1e19, 1e308]) {
    it(`OpenAI usage of ${huge} tokens: the answer is stored, counted at the cap; one call`, async () => {
      const fake = await openai(() => ({
        text: ["fine"],
        usage: { prompt_tokens: huge, completion_tokens: huge },
      }));
      const { id } = await client.createSession({
        agent: { model: { provider: "openai", model: "m", baseUrl: fake.url } },
      });
      await client.send(id, "hi");
      const session = await terminal(id);
      expect(session.parkedReason ?? null).toBeNull();
      expect(session.status).toBe("completed");
      expect(session.messages.at(-1)).toMatchObject({
        role: "assistant",
        content: "fine",
        usage: { inputTokens: MAX_REPORTED_TOKENS, outputTokens: MAX_REPORTED_TOKENS },
      });
      expect(fake.requests).toHaveLength(1);
    });
  }

  it("Anthropic usage of 1e308 tokens: the answer is stored; one call", async () => {
    anthropic.script({
      blocks: [{ type: "text", text: "fine" }],
      usage: { input_tokens: 1e308, output_tokens: 1e308 },
    });
    const { id } = await client.createSession({
      agent: { model: { provider: "anthropic", model: "c", baseUrl: anthropic.url, cache: false } },
    });
    await client.send(id, "hi");
    const session = await terminal(id);
    expect(session.status).toBe("completed");
    expect(session.messages.at(-1)).toMatchObject({
      content: "fine",
      usage: { inputTokens: MAX_REPORTED_TOKENS, outputTokens: MAX_REPORTED_TOKENS },
    });
  });

  it("negative usage is unknown, not 0: a tool loop still stops at budget.maxTokens", async () => {
    let n = 0;
    const fake = await openai(() => ({
      toolCalls: [
        {
          id: `c${n++}`,
          name: "append_file",
          arguments: JSON.stringify({ path: "neg.txt", line: "x".repeat(300) }),
        },
      ],
      usage: { prompt_tokens: -100_000, completion_tokens: -100_000 },
    }));
    const { id } = await client.createSession({
      agent: {
        model: { provider: "openai", model: "m", baseUrl: fake.url },
        tools: ["append_file"],
        maxTurns: 30,
        budget: { maxTokens: 2000 },
      },
    });
    await client.send(id, "loop");
    const session = await terminal(id);
    expect(session.parkedReason).toMatch(/^budget_exhausted: agent.budget.maxTokens/);
    expect(fake.requests.length).toBeLessThan(15);
    const steps = session.messages.filter((m) => m.role === "assistant");
    expect(steps.every((m) => !("usage" in m) || m.usage == null)).toBe(true);
  });

  it("Anthropic: a negative output count in message_delta makes the step's usage unknown", async () => {
    anthropic.script({
      blocks: [{ type: "text", text: "ok" }],
      usage: { input_tokens: 10, output_tokens: -50 },
    });
    const { id } = await client.createSession({
      agent: { model: { provider: "anthropic", model: "c", baseUrl: anthropic.url, cache: false } },
    });
    await client.send(id, "hi");
    const session = await terminal(id);
    expect(session.status).toBe("completed");
    const last = session.messages.at(-1);
    expect(last?.role).toBe("assistant");
    expect(last?.role === "assistant" ? (last.usage ?? null) : "not a step").toBeNull();
  });

  it("budget.maxModelCalls counts retries: a provider answering 503 gets exactly maxModelCalls requests", async () => {
    // Before: each counted call was up to 4 requests (the retries before output were free),
    // so maxModelCalls: 3 let a failing provider be asked 12 times across the run and its resumes.
    const fake = await openai(() => ({ status: 503, errorType: "server_error" }));
    const { id } = await client.createSession({
      agent: { model: { provider: "openai", model: "m", baseUrl: fake.url }, budget: { maxModelCalls: 3 } },
    });
    await client.send(id, "hi");
    const session = await terminal(id);
    expect(session.parkedReason).toMatch(
      /^budget_exhausted: agent.budget.maxModelCalls: all 3 model calls made/,
    );
    expect(fake.requests).toHaveLength(3);
  });
});
