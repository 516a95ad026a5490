/**
 * Usage sums count only the steps whose provider reported usage: a session whose steps
 * reported none read 0 tokens and looked free. Every sum now carries `unknownSteps`, the
 * model steps it could not count — a run's (`runs[].usage`, as its worker summed it), a
 * session's (whole or paged), a batch's (`?include=usage`) and each batch result's.
 */
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import type { FleetClient } from "../src/producer/client.js";
import type { Message } from "../src/shared/messages.js";
import { totalUsage } from "../src/shared/prices.js";
import { finalUsage } from "../src/worker/hand-back.js";
import { createFleetEnv, type FleetEnv } from "./support/fleet-env.js";

const AGENT = { model: { provider: "scripted" as const, steps: [{ text: "ok" }] } };

/** Two steps with usage (10 + 2 each), one without. */
const HISTORY: Message[] = [
  { role: "user", content: "one" },
  { role: "assistant", content: "a", stopReason: "end_turn", usage: { inputTokens: 10, outputTokens: 2 } },
  { role: "user", content: "two" },
  { role: "assistant", content: "b", stopReason: "end_turn" },
  { role: "user", content: "three" },
  { role: "assistant", content: "c", stopReason: "end_turn", usage: { inputTokens: 10, outputTokens: 2 } },
];

describe("unknownSteps (pure)", () => {
  it("totalUsage counts each step with no usage, and only steps", () => {
    expect(totalUsage([{ inputTokens: 1, outputTokens: 2 }, null, undefined])).toMatchObject({
      inputTokens: 1,
      outputTokens: 2,
      unknownSteps: 2,
    });
    expect(totalUsage([]).unknownSteps).toBe(0);
  });

  it("a handed-back run's parts add up their unknown steps", () => {
    const previous = { inputTokens: 5, outputTokens: 1, unknownSteps: 2, waitedMs: 100, handBacks: 1 };
    const total = finalUsage({ inputTokens: 1, outputTokens: 1, unknownSteps: 1 }, previous, {
      gated: true,
      waitedMs: 150,
    });
    expect(total).toMatchObject({ inputTokens: 6, outputTokens: 2, unknownSteps: 3, waitedMs: 150 });
  });
});

describe("unknownSteps in the API's usage sums", () => {
  let fleet: FleetEnv;
  let client: FleetClient;

  beforeAll(async () => {
    fleet = await createFleetEnv("unknownusage");
    ({ client } = await fleet.startApi());
  }, 60_000);
  afterAll(() => fleet?.close());

  it("a session: whole and paged, the same totals with unknownSteps", async () => {
    const { id } = await client.createSession({ agent: AGENT, messages: HISTORY });
    const whole = await client.getSession(id);
    expect(whole.usage).toMatchObject({ inputTokens: 20, outputTokens: 4, unknownSteps: 1 });
    const paged = await client.getSession(id, { afterSeq: 2, limit: 1 });
    expect(paged.usage).toEqual(whole.usage);
  });

  it("a batch and its results", async () => {
    const batch = await client.createBatch([
      { agent: AGENT, messages: HISTORY, customId: "mixed" },
      { agent: AGENT, messages: HISTORY.slice(0, 2), customId: "known" },
      { agent: AGENT, customId: "none" },
    ]);
    const read = await client.getBatch(batch.id, { include: "usage" });
    expect(read.usage).toMatchObject({ inputTokens: 30, outputTokens: 6, unknownSteps: 1 });
    const results = new Map<string | null, { unknownSteps: number; inputTokens: number }>();
    for await (const result of client.batchResults(batch.id)) results.set(result.customId, result.usage);
    expect(results.get("mixed")).toMatchObject({ inputTokens: 20, unknownSteps: 1 });
    expect(results.get("known")).toMatchObject({ inputTokens: 10, unknownSteps: 0 });
    expect(results.get("none")).toMatchObject({ inputTokens: 0, unknownSteps: 0 });
  });

  it("a run whose model reports no usage (the scripted model): 0 tokens, and unknownSteps says why", async () => {
    await fleet.spawnWorker();
    const { id } = await client.createSession({
      agent: {
        model: {
          provider: "scripted",
          steps: [{ toolCalls: [{ name: "sleep", arguments: { ms: 1 } }] }, { text: "done" }],
        },
        tools: ["sleep"],
      },
    });
    const { runId } = await client.send(id, "go");
    const run = await client.waitForRun(runId, { timeoutMs: 30_000 });
    expect(run.endedReason).toBe("completed");
    expect(run.usage).toMatchObject({ inputTokens: 0, outputTokens: 0, unknownSteps: 2 });
    const session = await client.getSession(id);
    expect(session.usage).toMatchObject({ inputTokens: 0, outputTokens: 0, unknownSteps: 2 });
    expect(session.runs[0]!.usage).toMatchObject({ unknownSteps: 2 });
  }, 60_000);
});
