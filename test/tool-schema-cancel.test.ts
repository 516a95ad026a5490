/**
 * A cancel that lands while a tool's arguments are still being checked (an async zod schema:
 * `safeParseAsync`): the tool never started, so the call is answered as one not yet started
 * (README "Cancel": `Cancelled: the run was stopped before this tool started, so it did not
 * run.`), and the tool does not start once the check is done. Before, the call was answered
 * `Cancelled while running: Invalid arguments: …` (or `Cancelled while running: the tool did
 * not stop within 2000 ms …` for a check still pending), and arguments the check accepted after
 * the cancel ran the tool anyway, its signal already aborted. Real API, worker (in this
 * process), Postgres and Redis.
 *
 * Its events agree with its answer (contracts §7): TOOL_STARTED is sent when a tool starts
 * running, after its arguments passed their check, so a call whose tool never ran (cancelled
 * during the check, or its arguments refused) has its TOOL_FINISHED (success false) and no
 * TOOL_STARTED. Before, TOOL_STARTED was sent before the check: a stream said a tool started
 * that never did.
 */
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import type { FleetClient, FleetEvent } from "../src/producer/client.js";
import type { Message } from "../src/shared/messages.js";
import { CANCELLED_BEFORE_START_TEXT } from "../src/shared/resume-plan.js";
import { type RunningWorker, startWorker } from "../src/worker/worker.js";
import { createFleetEnv, type FleetEnv, waitFor } from "./support/fleet-env.js";
import { notifyTool } from "./support/notify-tool.js";
import { readSse } from "./support/sse.js";

let fleet: FleetEnv;
let client: FleetClient;
let base: string;
let worker: RunningWorker;
const sent: string[] = [];
/** Checks waiting, by address: each waits until the test lets it go on. */
const checks = new Map<string, () => void>();

const notify = notifyTool((to) => new Promise<void>((resolve) => checks.set(to, resolve)), sent);

beforeAll(async () => {
  fleet = await createFleetEnv("tool-schema-cancel");
  const started = await fleet.startApi();
  client = started.client;
  base = started.api.url;
  worker = await startWorker(
    { ...fleet.config, logLevel: "silent" },
    { serveMetrics: false, tools: [notify] },
  );
}, 60_000);
afterAll(async () => {
  for (const release of checks.values()) release();
  await worker?.stop();
  await fleet?.close();
});

const agent = (to: string) => ({
  model: {
    provider: "scripted" as const,
    steps: [{ toolCalls: [{ id: "call", name: "notify", arguments: { to } }] }, { text: "done" }],
  },
  tools: ["notify"],
});

/** The tool events of a session's stream, up to its run's end, as `TYPE success?`. */
async function toolEvents(sessionId: string): Promise<string[]> {
  const read = await readSse(`${base}/v1/sessions/${sessionId}/events?after=0-0`, {
    stop: (e) => e.type === "RUN_COMPLETED",
  });
  return read.events.flatMap((e: FleetEvent) =>
    e.type === "TOOL_STARTED"
      ? [`TOOL_STARTED ${e.data.toolCallId}`]
      : e.type === "TOOL_FINISHED"
        ? [`TOOL_FINISHED ${e.data.toolCallId} ${e.data.success}`]
        : [],
  );
}

/** Runs a session whose one call to `notify` (to `to`) is cancelled during its check; `release`: when the check ends. */
async function cancelledDuringCheck(
  to: string,
  release: () => Promise<void>,
): Promise<{ messages: Message[]; events: string[] }> {
  const session = await client.createSession({ agent: agent(to) });
  const { runId } = await client.send(session.id, "notify");
  await waitFor(async () => checks.has(to), 20_000, "the check under way");
  await client.cancelSession(session.id);
  await release();
  expect((await client.waitForRun(runId, { timeoutMs: 30_000 })).endedReason).toBe("cancelled");
  const messages: Message[] = [];
  for await (const message of client.messages(session.id)) messages.push(message);
  return { messages, events: await toolEvents(session.id) };
}

describe("a cancel during an async check of a tool's arguments", () => {
  it("answers the call as not started, and the tool does not start after the check", async () => {
    // The check outlasts the grace after the cancel: the call is answered without it.
    const { messages, events } = await cancelledDuringCheck("ops@example.com", async () => {});
    checks.get("ops@example.com")!();
    await new Promise((resolve) => setTimeout(resolve, 300));
    expect(sent).toEqual([]);
    expect(messages.filter((m) => m.role === "tool")).toEqual([
      expect.objectContaining({ toolCallId: "call", success: false, content: CANCELLED_BEFORE_START_TEXT }),
    ]);
    expect(events).toEqual(["TOOL_FINISHED call false"]);
  }, 60_000);

  it("answers a call whose check refuses its arguments after the cancel as not started", async () => {
    // The check ends within the grace (1 s after the cancel's 202), refusing the arguments.
    const { messages, events } = await cancelledDuringCheck("ops", async () => {
      await new Promise((resolve) => setTimeout(resolve, 1_000));
      checks.get("ops")!();
    });
    expect(messages.filter((m) => m.role === "tool")).toEqual([
      expect.objectContaining({ toolCallId: "call", success: false, content: CANCELLED_BEFORE_START_TEXT }),
    ]);
    expect(events).toEqual(["TOOL_FINISHED call false"]);
  }, 60_000);

  it("sends TOOL_STARTED once the arguments passed, and none for arguments refused", async () => {
    const ran = await client.createSession({ agent: agent("dev@example.com") });
    const refused = await client.createSession({ agent: agent("dev") });
    const runs = [await client.send(ran.id, "notify"), await client.send(refused.id, "notify")];
    await waitFor(async () => checks.has("dev@example.com") && checks.has("dev"), 20_000, "both checks");
    checks.get("dev@example.com")!();
    checks.get("dev")!();
    for (const { runId } of runs) await client.waitForRun(runId, { timeoutMs: 30_000 });
    expect(await toolEvents(ran.id)).toEqual(["TOOL_STARTED call", "TOOL_FINISHED call true"]);
    expect(await toolEvents(refused.id)).toEqual(["TOOL_FINISHED call false"]);
  }, 60_000);
});
