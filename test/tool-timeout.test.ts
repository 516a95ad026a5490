/**
 * Tool time limits (README "Agents, models and tools"): before, a tool that never returned
 * held its run, its worker slot and its session until a cancel. Now a call past
 * FLEET_TOOL_TIMEOUT_MS (or its tool's own `timeoutMs`, or a shorter `agent.toolTimeoutMs`)
 * has its signal aborted and is answered once, as failed, and the run goes on; a result its
 * tool gives later is discarded and logged. Real API and worker (in this process, for its
 * tools and registry; one slot), Postgres and Redis.
 */
import pino from "pino";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import type { FleetClient, FleetEvent } from "../src/producer/client.js";
import { CANCELLED_WHILE_RUNNING_PREFIX } from "../src/shared/resume-plan.js";
import { defineTool } from "../src/worker/tools/registry.js";
import { toolTimedOutText } from "../src/worker/tools/time-limit.js";
import { type RunningWorker, startWorker } from "../src/worker/worker.js";
import { createFleetEnv, type FleetEnv, seqsOf, waitFor } from "./support/fleet-env.js";
import { readSse } from "./support/sse.js";

const LIMIT_MS = 300;

function deferred<T>() {
  let resolve!: (value: T) => void;
  const promise = new Promise<T>((r) => {
    resolve = r;
  });
  return { promise, resolve };
}

const noArgs = { type: "object", properties: {} };
/** Resolved with each call's signal as its tool starts, by call id. */
const started = new Map<string, ReturnType<typeof deferred<AbortSignal>>>();
const startedCall = (callId: string) => {
  if (!started.has(callId)) started.set(callId, deferred<AbortSignal>());
  return started.get(callId)!;
};
/** Lets the `late` tool return. */
const releaseLate = deferred<void>();

const tools = [
  // Never returns and ignores its signal (a request without a timeout).
  defineTool({
    name: "deaf",
    description: "never returns",
    parameters: noArgs,
    run: (_args, { callId, signal }) => {
      startedCall(callId).resolve(signal);
      return new Promise<string>(() => {});
    },
  }),
  // Ignores its signal and returns when the test says, long after its call was answered.
  defineTool({
    name: "late",
    description: "returns late",
    parameters: noArgs,
    run: async (_args, { callId, signal }) => {
      startedCall(callId).resolve(signal);
      await releaseLate.promise;
      return "the late result";
    },
  }),
  // Returns (successfully) just after its limit, as its signal is aborted.
  defineTool({
    name: "just_late",
    description: "returns just after its limit",
    parameters: noArgs,
    run: (_args, { callId, signal }) => {
      startedCall(callId).resolve(signal);
      return new Promise<string>((resolve) =>
        signal.addEventListener("abort", () => resolve("returned just after the limit")),
      );
    },
  }),
  defineTool({
    name: "quick",
    description: "returns at once",
    parameters: noArgs,
    run: async (_args, { callId, signal }) => {
      startedCall(callId).resolve(signal);
      return "quick result";
    },
  }),
  // No limit of its own (operator code): only a cancel or an agent's limit ends it.
  defineTool({
    name: "unbounded",
    description: "never returns, no time limit",
    parameters: noArgs,
    timeoutMs: 0,
    run: (_args, { callId, signal }) => {
      startedCall(callId).resolve(signal);
      return new Promise<string>(() => {});
    },
  }),
];

let fleet: FleetEnv;
let client: FleetClient;
let base: string;
let worker: RunningWorker;
const logged: Record<string, unknown>[] = [];

beforeAll(async () => {
  fleet = await createFleetEnv("tooltimeout");
  const started = await fleet.startApi();
  client = started.client;
  base = started.api.url;
  const logger = pino({ level: "warn" }, { write: (line: string) => void logged.push(JSON.parse(line)) });
  worker = await startWorker(
    { ...fleet.config, toolTimeoutMs: LIMIT_MS, workerConcurrency: 1 },
    { tools, logger, serveMetrics: false },
  );
}, 60_000);
afterAll(async () => {
  await worker?.stop();
  await fleet?.close();
});

/** A tool-labelled metric of the worker, by tool. */
async function byTool(name: string): Promise<Record<string, number>> {
  const metric = (await worker.metrics.registry.getMetricsAsJSON()).find((m) => m.name === name);
  return Object.fromEntries((metric?.values ?? []).map((v) => [String(v.labels.tool), v.value]));
}
const timeouts = () => byTool("fleet_tool_timeouts_total");
/** `fleet_tools_abandoned`: calls answered whose tool still runs. */
const abandoned = () => byTool("fleet_tools_abandoned");

/** A session whose model calls `tool` (call id `callId`), then answers `after`. */
async function runOne(tool: string, callId: string, agent: Record<string, unknown> = {}) {
  const steps = [{ toolCalls: [{ id: callId, name: tool, arguments: {} }] }, { text: `after ${callId}` }];
  const { id } = await client.createSession({
    agent: { model: { provider: "scripted", steps }, tools: [tool], ...agent },
  });
  const { runId } = await client.send(id, "go");
  return { id, runId };
}

const toolResults = async (id: string) =>
  (await client.getSession(id)).messages.filter((m) => m.role === "tool");

describe("a tool's time limit", () => {
  it("starts fleet_tool_timeouts_total at 0 for every registered tool", async () => {
    expect(await timeouts()).toMatchObject({ deaf: 0, late: 0, just_late: 0, quick: 0, unbounded: 0 });
    expect(await abandoned()).toMatchObject({ deaf: 0, late: 0, just_late: 0, quick: 0, unbounded: 0 });
  });

  it("answers a tool that never returns and ignores its signal as failed, and the run goes on", async () => {
    const { id, runId } = await runOne("deaf", "d1");
    expect((await client.waitForRun(runId, { timeoutMs: 30_000 })).endedReason).toBe("completed");
    expect((await startedCall("d1").promise).aborted).toBe(true);
    const { messages } = await client.getSession(id);
    expect(messages.map((m) => [m.role, m.content])).toEqual([
      ["user", "go"],
      ["assistant", ""],
      ["tool", toolTimedOutText(LIMIT_MS)],
      ["assistant", "after d1"],
    ]);
    expect(messages[2]).toMatchObject({ toolCallId: "d1", name: "deaf", success: false });
    expect(seqsOf(messages)).toEqual([1, 2, 3, 4]);
    const events = (
      await readSse(`${base}/v1/sessions/${id}/events?after=0-0`, {
        stop: (e: FleetEvent) => e.type === "RUN_COMPLETED",
      })
    ).events;
    expect(events.filter((e) => e.type === "TOOL_FINISHED").map((e) => e.data)).toEqual([
      expect.objectContaining({ toolCallId: "d1", name: "deaf", success: false }),
    ]);
    expect((await timeouts()).deaf).toBe(1);
    expect(logged).toContainEqual(
      expect.objectContaining({
        msg: "tool call timed out",
        sessionId: id,
        toolCallId: "d1",
        timeoutMs: LIMIT_MS,
      }),
    );
  }, 60_000);

  it("never stores a result that comes after the call was answered: it is logged instead", async () => {
    // One worker slot, still held by `deaf`'s call had nothing freed it: this run needs it.
    const { id, runId } = await runOne("late", "l1");
    expect((await client.waitForRun(runId, { timeoutMs: 30_000 })).endedReason).toBe("completed");
    const before = (await client.getSession(id)).messages;
    expect(before.map((m) => m.content)).toEqual(["go", "", toolTimedOutText(LIMIT_MS), "after l1"]);
    // The worker still carries the deaf tool's call: counted until the tool ends.
    expect((await abandoned()).late).toBe(1);
    releaseLate.resolve();
    await waitFor(
      () => logged.some((line) => line.toolCallId === "l1" && String(line.msg).includes("discarded")),
      20_000,
      "the late result logged",
    );
    expect(logged).toContainEqual(
      expect.objectContaining({ sessionId: id, tool: "late", toolCallId: "l1", success: true }),
    );
    const after = (await client.getSession(id)).messages;
    expect(after).toEqual(before);
    expect((await timeouts()).late).toBe(1);
    expect((await abandoned()).late).toBe(0);
  }, 60_000);

  it("answers as timed out a tool that returns just after its limit (its result is not stored)", async () => {
    const { id, runId } = await runOne("just_late", "j1");
    expect((await client.waitForRun(runId, { timeoutMs: 30_000 })).endedReason).toBe("completed");
    expect(await toolResults(id)).toEqual([
      expect.objectContaining({ toolCallId: "j1", content: toolTimedOutText(LIMIT_MS), success: false }),
    ]);
    expect((await timeouts()).just_late).toBe(1);
  }, 60_000);

  it("leaves a tool under its limit untouched", async () => {
    const { id, runId } = await runOne("quick", "q1");
    expect((await client.waitForRun(runId, { timeoutMs: 30_000 })).endedReason).toBe("completed");
    expect(await toolResults(id)).toEqual([
      expect.objectContaining({ toolCallId: "q1", content: "quick result", success: true }),
    ]);
    expect((await startedCall("q1").promise).aborted).toBe(false);
    expect((await timeouts()).quick).toBe(0);
  }, 60_000);

  it("applies an agent's shorter limit, also to a tool without one of its own", async () => {
    const { id, runId } = await runOne("unbounded", "a1", { toolTimeoutMs: 100 });
    expect((await client.waitForRun(runId, { timeoutMs: 30_000 })).endedReason).toBe("completed");
    expect(await toolResults(id)).toEqual([
      expect.objectContaining({ toolCallId: "a1", content: toolTimedOutText(100), success: false }),
    ]);
    expect((await timeouts()).unbounded).toBe(1);
  }, 60_000);

  it("still lets a cancel end a call that has no limit", async () => {
    const { id, runId } = await runOne("unbounded", "c1");
    const signal = await startedCall("c1").promise;
    await client.cancelSession(id);
    expect((await client.waitForRun(runId, { timeoutMs: 30_000 })).endedReason).toBe("cancelled");
    expect(signal.aborted).toBe(true);
    const [result] = await toolResults(id);
    expect(result).toMatchObject({ toolCallId: "c1", success: false });
    expect(result!.content.startsWith(CANCELLED_WHILE_RUNNING_PREFIX)).toBe(true);
    expect((await timeouts()).unbounded).toBe(1);
    // Neither call of `unbounded` ever ends (the timed-out a1, the cancelled c1), nor `deaf`'s;
    // `just_late` stopped within the grace and `late` has returned.
    expect(await abandoned()).toMatchObject({ deaf: 1, late: 0, just_late: 0, quick: 0, unbounded: 2 });
  }, 60_000);
});
