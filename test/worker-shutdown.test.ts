/**
 * SIGTERM to a real `fleet worker` process: a busy worker lets its run finish for the grace
 * period, then aborts it (the run ends `cancelled`, the history stays whole, a resume is
 * queued for another worker) and exits 0; an idle worker exits 0 at once.
 */

import { afterAll, beforeAll, describe, expect, it } from "vitest";
import type { FleetClient } from "../src/producer/client.js";
import { parseHistory } from "../src/shared/messages.js";
import { createFleetEnv, type FleetEnv, seqsOf, type WorkerProcess } from "./support/fleet-env.js";
import { waitForToolCall } from "./support/tool-call-stored.js";

/** Resolves with the exit code, or rejects after `ms`. */
function exitWithin(exited: Promise<number | string>, ms: number): Promise<number | string> {
  return Promise.race([
    exited,
    new Promise<never>((_, reject) =>
      setTimeout(() => reject(new Error(`worker did not exit within ${ms} ms`)), ms).unref(),
    ),
  ]);
}

describe("worker shutdown on SIGTERM", () => {
  let fleet: FleetEnv;
  let client: FleetClient;
  beforeAll(async () => {
    fleet = await createFleetEnv("shutdown");
    ({ client } = await fleet.startApi());
  });
  afterAll(async () => fleet?.close());
  /** A worker with nothing to do, for the last case. */
  let idle: WorkerProcess | undefined;

  it("aborts a running tool after the grace period, exits 0, and another worker resumes the session", async () => {
    const worker = await fleet.spawnWorker({ SHUTDOWN_GRACE_MS: "500" });
    const { id } = await client.createSession({
      agent: {
        model: {
          provider: "scripted",
          steps: [{ toolCalls: [{ name: "sleep", arguments: { ms: 10_000 } }] }, { text: "recovered" }],
        },
        tools: ["sleep"],
      },
    });
    const { runId } = await client.send(id, "sleep a while");
    await waitForToolCall(client, id, "sleep");
    worker.child.kill("SIGTERM");
    const code = await exitWithin(worker.exited, 20_000);
    expect(code, worker.output()).toBe(0);
    // It waited for the grace period, then aborted the tool rather than waiting for its 10 s:
    // it says so (the grace timer fired), and the sleep has no successful result (below).
    expect(worker.output().match(/grace period over: aborting running work/g), worker.output()).toHaveLength(
      1,
    );

    const run = await client.getRun(runId);
    expect(run.status).toBe("ended");
    expect(run.endedReason).toBe("cancelled");

    const stopped = await client.getSession(id);
    expect(() => parseHistory(stopped.messages)).not.toThrow();
    expect(seqsOf(stopped.messages)).toEqual(stopped.messages.map((_, i) => i + 1));
    const call = stopped.messages.find((m) => m.role === "assistant" && m.toolCalls?.length);
    if (call?.role !== "assistant") throw new Error("no assistant message with the sleep call");
    const sleepId = call.toolCalls![0]!.id;
    const results = stopped.messages.filter((m) => m.role === "tool" && m.toolCallId === sleepId);
    expect(results.length).toBeLessThanOrEqual(1);
    for (const result of results) expect(result).toMatchObject({ success: false, name: "sleep" });
    expect(stopped.messages.some((m) => m.role === "assistant" && m.content === "recovered")).toBe(false);

    // The stopping worker handed the session over: a resume run, asked for by a worker, waits.
    const handover = stopped.runs.filter((r) => r.kind === "resume");
    expect(handover).toHaveLength(1);
    expect(handover[0]).toMatchObject({ trigger: "worker", status: "queued" });

    // A new worker picks it up and the session completes.
    idle = await fleet.spawnWorker();
    const resumed = await client.waitForRun(handover[0]!.id, { timeoutMs: 20_000 });
    expect(resumed.endedReason).toBe("completed");
    expect(resumed.trigger).toBe("worker");
    expect(["call_model", "recover_tools"]).toContain(resumed.resumeKind);

    const done = await client.getSession(id);
    expect(() => parseHistory(done.messages)).not.toThrow();
    expect(seqsOf(done.messages)).toEqual(done.messages.map((_, i) => i + 1));
    expect(done.messages.at(-1)).toMatchObject({ role: "assistant", content: "recovered" });
    const sleepResults = done.messages.filter((m) => m.role === "tool" && m.toolCallId === sleepId);
    expect(sleepResults).toHaveLength(1);
    expect(sleepResults[0]).toMatchObject({ success: false });
    const resultIds = done.messages.flatMap((m) => (m.role === "tool" ? [m.toolCallId] : []));
    expect(new Set(resultIds).size).toBe(resultIds.length);
    expect(done.status).toBe("completed");
    expect(await client.resumePoint(id)).toEqual({ resumable: false, reason: "completed" });
    // Two worker starts: past the default 30 s once, at a load of 21 on two cores.
  }, 60_000);

  it("exits 0 quickly when idle", async () => {
    // The first case's second worker, idle once the session it resumed has completed (a worker
    // process needs ~1.7-3 s of CPU to be ready); a worker of its own when that case did not run.
    const worker = idle ?? (await fleet.spawnWorker());
    worker.child.kill("SIGTERM");
    const code = await exitWithin(worker.exited, 20_000);
    expect(code, worker.output()).toBe(0);
    // Nothing running: it stopped as soon as its BullMQ workers closed, not at the grace
    // period's end (SHUTDOWN_GRACE_MS, 5 s here), which it would say.
    expect(worker.output()).not.toMatch(/grace period over/);
  });
});
