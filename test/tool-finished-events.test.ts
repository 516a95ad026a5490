/**
 * Contracts §7: `TOOL_FINISHED` is sent when a tool call's result is committed — also when the
 * result is not written by the run that started the call: a call cut by a SIGKILLed worker and
 * answered as interrupted by the resume, and a call answered as cancelled before it started.
 * A reader that pairs TOOL_STARTED with TOOL_FINISHED never sees a tool left running.
 */
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import type { FleetClient, FleetEvent } from "../src/producer/client.js";
import { loadConfig } from "../src/shared/config.js";
import { type RunningSweeper, startSweeper } from "../src/sweeper/sweeper-process.js";
import { createFleetEnv, type FleetEnv, waitFor } from "./support/fleet-env.js";
import { INTERRUPTED_TEXT } from "./support/sleepy-sessions.js";
import { readSse } from "./support/sse.js";

describe("TOOL_FINISHED for every committed tool result", () => {
  let fleet: FleetEnv;
  let client: FleetClient;
  let base: string;

  beforeAll(async () => {
    fleet = await createFleetEnv("h4toolfinished");
    const { api, client: c } = await fleet.startApi();
    client = c;
    base = api.url;
  }, 60_000);
  afterAll(() => fleet?.close());

  const allEvents = async (id: string, done: (e: FleetEvent) => boolean) =>
    (await readSse(`${base}/v1/sessions/${id}/events?after=0-0`, { stop: done })).events;

  it("a call cut by a crash gets its TOOL_FINISHED when the resume answers it", async () => {
    const sweeper: RunningSweeper = await startSweeper(
      { ...loadConfig(fleet.env), logLevel: "silent" },
      { serveMetrics: false },
    );
    try {
      const victim = await fleet.spawnWorker();
      const { id } = await client.createSession({
        agent: {
          model: {
            provider: "scripted",
            steps: [
              { toolCalls: [{ id: "nap", name: "sleep", arguments: { ms: 30_000 } }] },
              { text: "done" },
            ],
          },
          tools: ["sleep"],
        },
      });
      const { runId } = await client.send(id, "nap");
      await allEvents(id, (e) => e.type === "TOOL_STARTED" && e.data.toolCallId === "nap");
      victim.child.kill("SIGKILL");
      await victim.exited;
      await fleet.spawnWorker();
      const events = await allEvents(
        id,
        (e) => e.type === "RUN_COMPLETED" && e.data.runId !== runId && e.data.outcome === "completed",
      );
      const session = await client.getSession(id);
      expect(session.runs.map((r) => r.endedReason)).toEqual(["crashed", "completed"]);
      const resumeId = session.runs[1]!.id;
      const answered = events.findIndex(
        (e) =>
          e.type === "MESSAGE" &&
          e.data.message.toolCallId === "nap" &&
          e.data.message.content === INTERRUPTED_TEXT,
      );
      const finished = events.filter((e) => e.type === "TOOL_FINISHED" && e.data.toolCallId === "nap");
      expect(answered).toBeGreaterThan(0);
      expect(finished).toHaveLength(1);
      expect(finished[0]!.data).toMatchObject({ runId: resumeId, name: "sleep", success: false });
      expect(events.indexOf(finished[0]!)).toBeGreaterThan(answered);
      // Every TOOL_STARTED has its TOOL_FINISHED.
      const started = events.filter((e) => e.type === "TOOL_STARTED").map((e) => e.data.toolCallId);
      const ended = events.filter((e) => e.type === "TOOL_FINISHED").map((e) => e.data.toolCallId);
      expect(ended).toEqual(expect.arrayContaining(started));
    } finally {
      await sweeper.stop();
    }
  }, 60_000);

  it("a call answered as cancelled before it started gets a TOOL_FINISHED too", async () => {
    await fleet.spawnWorker();
    const { id } = await client.createSession({
      agent: {
        model: {
          provider: "scripted",
          steps: [
            {
              toolCalls: [
                { id: "long", name: "sleep", arguments: { ms: 30_000 } },
                { id: "never", name: "sleep", arguments: { ms: 1 } },
              ],
            },
          ],
        },
        tools: ["sleep"],
      },
    });
    await client.send(id, "nap twice");
    await allEvents(id, (e) => e.type === "TOOL_STARTED" && e.data.toolCallId === "long");
    const res = await fetch(`${base}/v1/sessions/${id}/cancel`, { method: "POST" });
    expect(res.status).toBe(202);
    await waitFor(async () => (await client.getSession(id)).status === "cancelled", 20_000, "cancelled");
    const events = await allEvents(id, (e) => e.type === "RUN_COMPLETED");
    const finished = events.filter((e) => e.type === "TOOL_FINISHED").map((e) => e.data.toolCallId);
    expect(finished).toEqual(["long", "never"]);
  }, 60_000);
});
