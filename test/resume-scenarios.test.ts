/**
 * The source's acceptance scenario (resume-semantics.md §7, the source's resume.py), run
 * end to end through the real HTTP API and a real `fleet worker` child process.
 */
import { existsSync } from "node:fs";
import { readdir, readFile } from "node:fs/promises";
import { join } from "node:path";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { FleetApiError, type FleetClient } from "../src/producer/client.js";
import type { Message } from "../src/shared/messages.js";
import { createFleetEnv, type FleetEnv, seqsOf } from "./support/fleet-env.js";
import { CRASH_HISTORY } from "./support/histories.js";

const INTERRUPTED_LITERAL =
  "The process stopped while this tool was running, so it may or may not have completed, and whatever it changes may or may not have happened. Check the current state before running it again.";

describe("resume.py scenarios through the API and a worker process", () => {
  let fleet: FleetEnv;
  let client: FleetClient;
  beforeAll(async () => {
    fleet = await createFleetEnv("resumescen");
    ({ client } = await fleet.startApi());
    await fleet.spawnWorker();
  });
  afterAll(async () => fleet?.close());

  it("§7.1 a failure: the tool ran, the connection dropped; resume answers and the tool ran once", async () => {
    const { id } = await client.createSession({
      agent: {
        model: {
          provider: "scripted",
          steps: [
            { toolCalls: [{ name: "append_file", arguments: { path: "notes.txt", line: "hi" } }] },
            { fault: "connection" },
          ],
        },
        tools: ["append_file"],
      },
    });
    const { runId } = await client.send(id, "Write notes.txt");
    const failed = await client.waitForRun(runId, { timeoutMs: 20_000 });
    expect(failed.status).toBe("ended");
    expect(failed.endedReason).toBe("provider_error");
    expect(failed.error).toMatch(/connection/);

    const before = await client.getSession(id);
    expect(before.messages.map((m) => m.role)).toEqual(["user", "assistant", "tool"]);
    expect(before.messages[2]).toMatchObject({ role: "tool", success: true, name: "append_file" });
    expect(await readFile(join(fleet.config.toolDir, "notes.txt"), "utf8")).toBe("hi\n");

    const point = await client.resumePoint(id);
    expect(point).toMatchObject({ resumable: true, kind: "call_model", unansweredToolCalls: [] });

    const resumed = await client.resume(id, {
      model: { provider: "scripted", steps: [{ text: "unused" }, { text: "Done: wrote notes.txt" }] },
    });
    expect(resumed.kind).toBe("call_model");
    expect(resumed.runId).toMatch(/\S/);
    const run = await client.waitForRun(resumed.runId, { timeoutMs: 20_000 });
    expect(run.endedReason).toBe("completed");
    expect(run.kind).toBe("resume");

    const session = await client.getSession(id);
    expect(session.messages.map((m) => m.role)).toEqual(["user", "assistant", "tool", "assistant"]);
    expect(session.messages.at(-1)).toMatchObject({
      role: "assistant",
      content: "Done: wrote notes.txt",
      stopReason: "end_turn",
    });
    expect(seqsOf(session.messages)).toEqual([1, 2, 3, 4]);
    // The tool ran exactly once: one line, not two.
    const notes = await readFile(join(fleet.config.toolDir, "notes.txt"), "utf8");
    expect(notes.split("\n").filter((l) => l !== "")).toEqual(["hi"]);

    // Afterwards there is nothing left to resume.
    const second = await client.resume(id).catch((e: unknown) => e);
    expect(second).toBeInstanceOf(FleetApiError);
    expect((second as FleetApiError).status).toBe(409);
    expect((second as FleetApiError).reason).toBe("completed");
    expect(await client.resumePoint(id)).toEqual({ resumable: false, reason: "completed" });

    const resumeRuns = session.runs.filter((r) => r.kind === "resume");
    expect(resumeRuns).toHaveLength(1);
    expect(resumeRuns[0]).toMatchObject({
      id: resumed.runId,
      resumeKind: "call_model",
      trigger: "api",
      status: "ended",
      endedReason: "completed",
    });
    expect(session.status).toBe("completed");
  });

  it("§7.2 a crash: an imported history with b unanswered is recovered without running a tool", async () => {
    const history: Message[] = CRASH_HISTORY;
    const { id } = await client.createSession({
      agent: {
        model: { provider: "scripted", steps: [{ text: "unused" }, { text: "1 tool was interrupted" }] },
        tools: ["write_file"],
      },
      messages: history,
    });
    const point = await client.resumePoint(id);
    expect(point.resumable).toBe(true);
    if (!point.resumable) throw new Error("unreachable");
    expect(point.kind).toBe("recover_tools");
    expect(point.unansweredToolCalls.map((c) => c.id)).toEqual(["b"]);
    expect(point.unansweredToolCalls[0]).toEqual({
      id: "b",
      name: "write_file",
      arguments: { path: "b.txt", content: "b" },
    });

    const resumed = await client.resume(id);
    expect(resumed.kind).toBe("recover_tools");
    const run = await client.waitForRun(resumed.runId, { timeoutMs: 20_000 });
    expect(run.endedReason).toBe("completed");

    const session = await client.getSession(id);
    const messages = session.messages;
    expect(seqsOf(messages)).toEqual(messages.map((_, i) => i + 1));
    expect(messages.map((m) => m.role)).toEqual(["user", "assistant", "tool", "tool", "assistant"]);
    // a's original result is kept unchanged at seq 3.
    expect(messages[2]).toMatchObject({
      seq: 3,
      role: "tool",
      toolCallId: "a",
      name: "write_file",
      content: "wrote a.txt",
      success: true,
    });
    const forB = messages.filter((m) => m.role === "tool" && m.toolCallId === "b");
    expect(forB).toHaveLength(1);
    expect(forB[0]).toMatchObject({
      seq: 4,
      role: "tool",
      name: "write_file",
      success: false,
      content: INTERRUPTED_LITERAL,
    });
    expect(messages.at(-1)).toMatchObject({ role: "assistant", content: "1 tool was interrupted" });
    // No tool was run by the resume itself.
    expect(existsSync(join(fleet.config.toolDir, "a.txt"))).toBe(false);
    expect(existsSync(join(fleet.config.toolDir, "b.txt"))).toBe(false);
    expect((await readdir(fleet.config.toolDir)).filter((f) => f === "a.txt" || f === "b.txt")).toEqual([]);

    expect(session.runs).toHaveLength(1);
    expect(session.runs[0]).toMatchObject({
      kind: "resume",
      resumeKind: "recover_tools",
      trigger: "api",
      endedReason: "completed",
    });
    expect(await client.resumePoint(id)).toEqual({ resumable: false, reason: "completed" });
  });
});
