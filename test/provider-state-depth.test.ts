/**
 * A provider state (contracts §13) nested deeper than MAX_PROVIDER_STATE_DEPTH — a Responses
 * reasoning item carrying a field 100,000 levels deep, as a broken or hostile server may send —
 * ends its step as any whole step ends, its text and stop reason kept, with the state stored as
 * a note of why it was left out (`omitted`) instead of the state: it is not replayed, the
 * history goes back plain. Before, the state went on to the recursive walks after it
 * (sanitizeJson, JSON.stringify), whose stack overflow (RangeError) was caught as a broken
 * stream: the step was stored `interrupted`, and every resume asked the same again.
 * The same bound as a tool call's arguments (MAX_TOOL_ARGUMENT_DEPTH, kept as text there).
 *
 * A real `fleet worker` and the fake Responses server (test/support/fake-openai-responses.ts).
 */
import { afterAll, beforeAll, expect, it } from "vitest";
import type { FleetClient } from "../src/producer/client.js";
import { callModel } from "../src/worker/call-model.js";
import { MAX_PROVIDER_STATE_DEPTH } from "../src/worker/models/provider-state.js";
import { useFakeProviders } from "./support/fake-providers.js";
import { createFleetEnv, type FleetEnv } from "./support/fleet-env.js";
import { gpt, noSleep, req } from "./support/model-steps.js";

const WAIT = { timeoutMs: 60_000 };
const nested = (depth: number) => `${"[".repeat(depth)}${"]".repeat(depth)}`;
const fakes = useFakeProviders();
let fleet: FleetEnv;
let client: FleetClient;

beforeAll(async () => {
  fleet = await createFleetEnv("providerstatedepth", {
    env: { FLEET_ALLOWED_BASE_URLS: "http://127.0.0.1" },
  });
  client = (await fleet.startApi()).client;
  await fleet.spawnWorker();
}, 90_000);

afterAll(async () => {
  await fleet?.close();
});

it("a reasoning item nested 100,000 levels deep: the step completes, its state stored as omitted", async () => {
  fakes.responses.script(
    { reasoning: true, reasoningFields: `"deep":${nested(100_000)}`, text: ["the answer"] },
    { text: ["again"] },
  );
  const { id } = await client.createSession({
    agent: {
      model: { provider: "openai", api: "responses", model: "o4-test", baseUrl: fakes.responses.url },
    },
  });
  const run = await client.waitForRun((await client.send(id, "hi")).runId, WAIT);
  expect(run.endedReason).toBe("completed");
  const session = await client.getSession(id);
  const step = session.messages.find((m) => m.role === "assistant");
  expect(step).toMatchObject({
    content: "the answer",
    stopReason: "end_turn",
    providerState: {
      provider: "openai",
      api: "responses",
      omitted: `nested deeper than ${MAX_PROVIDER_STATE_DEPTH} levels`,
    },
  });
  expect(step && "providerState" in step && step.providerState).not.toHaveProperty("output");
  // The next request goes with the plain history, and is answered.
  const next = await client.waitForRun((await client.send(id, "more")).runId, WAIT);
  expect(next.endedReason).toBe("completed");
  const input = fakes.responses.requests.at(-1)!.body.input as { type?: string }[];
  expect(input.some((item) => item.type === "reasoning")).toBe(false);
});

it("a state nested to the bound is kept as it came", async () => {
  const fields = `"deep":${nested(MAX_PROVIDER_STATE_DEPTH - 5)}`;
  fakes.responses.script({ reasoning: true, reasoningFields: fields, text: ["kept"] });
  const step = await callModel(
    gpt("responses", fakes.responses.url),
    req([{ role: "user", content: "hi" }]),
    {
      sleep: noSleep,
      policy: { maxAttempts: 1, baseDelayMs: 1, maxDelayMs: 1 },
    },
  );
  if (!step.ok) throw new Error(step.error);
  const output = step.message.providerState?.output as { type: string; deep?: unknown }[];
  expect(output[0]).toMatchObject({
    type: "reasoning",
    deep: JSON.parse(nested(MAX_PROVIDER_STATE_DEPTH - 5)),
  });
});
