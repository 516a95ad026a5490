/**
 * A tool's `callKey` (its ToolContext): the key a downstream idempotency key should be, unique
 * to the call across the fleet. The model's `callId` is not: the scripted model names every
 * session's first call `call_0_0`, and providers reuse ids from step to step (`call_0`, Kimi's
 * `functions.NAME:0`). The README told operators to use `callId` as an idempotency key, so a
 * downstream API that deduplicates on it answered the second real action with the first one's
 * result and never did it. Real API, worker (in this process), Postgres and Redis.
 */
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import type { FleetClient } from "../src/producer/client.js";
import { defineTool } from "../src/worker/tools/registry.js";
import { type RunningWorker, startWorker } from "../src/worker/worker.js";
import { createFleetEnv, type FleetEnv } from "./support/fleet-env.js";

let fleet: FleetEnv;
let client: FleetClient;
let worker: RunningWorker;
/** What a downstream API that deduplicates on the key it is given did: one action per key. */
const done = new Map<string, string>();
const seen: { callId: string; callKey: string; sessionId: string }[] = [];

const send = defineTool({
  name: "send_once",
  description: "Sends a message, once per idempotency key.",
  parameters: { type: "object", properties: { text: { type: "string" } }, required: ["text"] },
  async run(args, context) {
    const { callId, callKey, sessionId } = context;
    seen.push({ callId, callKey, sessionId });
    const text = String((args as { text?: unknown }).text);
    const earlier = done.get(callKey);
    if (earlier !== undefined) return `already sent: ${earlier}`;
    done.set(callKey, text);
    return `sent: ${text}`;
  },
});

beforeAll(async () => {
  fleet = await createFleetEnv("tool-call-key");
  ({ client } = await fleet.startApi());
  worker = await startWorker({ ...fleet.config, logLevel: "silent" }, { serveMetrics: false, tools: [send] });
}, 60_000);
afterAll(async () => {
  await worker?.stop();
  await fleet?.close();
});

/** A session whose model calls send_once once a step, each step's call with the same id. */
async function runSession(texts: string[]): Promise<string[]> {
  const session = await client.createSession({
    agent: {
      model: {
        provider: "scripted",
        steps: [
          ...texts.map((text) => ({ toolCalls: [{ id: "call_0", name: "send_once", arguments: { text } }] })),
          { text: "done" },
        ],
      },
      tools: ["send_once"],
    },
  });
  const { runId } = await client.send(session.id, "go");
  const run = await client.waitForRun(runId, { timeoutMs: 30_000 });
  expect(run.endedReason).toBe("completed");
  const results: string[] = [];
  for await (const m of client.messages(session.id)) if (m.role === "tool") results.push(m.content);
  return results;
}

describe("a tool's callKey", () => {
  it("differs for every call: across sessions, and across steps that reuse the model's call id", async () => {
    const first = await runSession(["a1", "a2"]);
    const second = await runSession(["b1"]);
    expect([...first, ...second]).toEqual(["sent: a1", "sent: a2", "sent: b1"]);
    expect(new Set(seen.map((s) => s.callId))).toEqual(new Set(["call_0"]));
    expect(new Set(seen.map((s) => s.callKey)).size).toBe(3);
    // SESSION_ID:STEP_SEQ:CALL_ID — the step that asked for the call is its assistant message.
    for (const s of seen) expect(s.callKey).toMatch(new RegExp(`^${s.sessionId}:\\d+:call_0$`));
  }, 60_000);
});
