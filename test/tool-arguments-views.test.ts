/**
 * A tool (without a zod `schema`: plain JavaScript) that changes the arguments it was given —
 * "redacts" a field before logging it, normalizes a path in place, deletes what it used — changes
 * nothing the worker sends to the model or keeps: the arguments are the tool's own copy. Before,
 * they were the very object of the assistant step in the run's history (what the next model
 * request is built from, and what the worker keeps of the session for its next job), while
 * Postgres kept the original: the model was sent `"token": "***"` for the call it had made with
 * its real value, and a resume elsewhere sent the original. Real worker (in this process), API,
 * Postgres, Redis and a fake OpenAI-compatible server recording what it was sent.
 */
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import type { FleetClient } from "../src/producer/client.js";
import { defineTool } from "../src/worker/tools/registry.js";
import { type RunningWorker, startWorker } from "../src/worker/worker.js";
import { type FakeOpenAI, startFakeOpenAI } from "./support/fake-openai.js";
import { createFleetEnv, type FleetEnv } from "./support/fleet-env.js";

let fleet: FleetEnv;
let client: FleetClient;
let worker: RunningWorker;
let fake: FakeOpenAI;
const before = process.env.OPENAI_API_KEY;

/** Logs its call with the token hidden, the careless way: in place. */
const callApi = defineTool({
  name: "call_api",
  description: "Calls an API.",
  parameters: { type: "object", properties: { path: { type: "string" }, token: { type: "string" } } },
  async run(args: Record<string, unknown>) {
    args.token = "***";
    args.path = `/normalized${String(args.path)}`;
    return "called";
  },
});

beforeAll(async () => {
  process.env.OPENAI_API_KEY = "test-key";
  fleet = await createFleetEnv("tool-arguments-views", {
    env: { FLEET_ALLOWED_BASE_URLS: "http://127.0.0.1" },
  });
  ({ client } = await fleet.startApi());
  fake = await startFakeOpenAI();
  worker = await startWorker(
    { ...fleet.config, logLevel: "silent" },
    { serveMetrics: false, tools: [callApi] },
  );
}, 60_000);
afterAll(async () => {
  await worker?.stop();
  await fake?.close();
  await fleet?.close();
  if (before === undefined) delete process.env.OPENAI_API_KEY;
  else process.env.OPENAI_API_KEY = before;
});

describe("a tool that changes its arguments in place", () => {
  it("changes nothing the model is sent next", async () => {
    const sent = '{"path":"/v1/items","token":"tok-1234"}';
    fake.enqueue({ toolCalls: [{ id: "call_1", name: "call_api", arguments: sent }] }, { text: ["done"] });
    const session = await client.createSession({
      agent: { model: { provider: "openai", model: "gpt-test", baseUrl: fake.url }, tools: ["call_api"] },
    });
    const { runId } = await client.send(session.id, "call it");
    expect((await client.waitForRun(runId, { timeoutMs: 30_000 })).endedReason).toBe("completed");
    const second = fake.requests.filter((r) => r.path.endsWith("/chat/completions"))[1]!;
    const step = (
      second.body.messages as { role: string; tool_calls?: { function: { arguments: string } }[] }[]
    ).find((m) => m.role === "assistant");
    expect(JSON.parse(step!.tool_calls![0]!.function.arguments)).toEqual({
      path: "/v1/items",
      token: "tok-1234",
    });
  }, 60_000);
});
