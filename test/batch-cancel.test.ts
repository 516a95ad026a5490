/**
 * Cancellation (contracts §9) against real worker processes and an in-process sweeper:
 * cancelling a batch while its sessions are inside tools aborts the running tools with the
 * "cancelled while running" result, answers the calls not started, starts no tool after
 * the cancel returned, drops queued runs (and their jobs), resumes nothing afterwards — not
 * even past the sweeper's backoff — and the counts say cancelled. A new message re-opens a
 * cancelled session.
 */
import { readdir, readFile } from "node:fs/promises";
import { join } from "node:path";
import { Queue } from "bullmq";
import { afterAll, beforeAll, describe, expect, it, vi } from "vitest";
import type { FleetClient } from "../src/producer/client.js";
import { loadConfig } from "../src/shared/config.js";
import { type RunningSweeper, startSweeper } from "../src/sweeper/sweeper-process.js";
import { CANCELLED_BEFORE_START_TEXT } from "../src/worker/agent-loop.js";
import { createFleetEnv, type FleetEnv, waitFor } from "./support/fleet-env.js";

const agent = (i: number) => ({
  model: {
    provider: "scripted" as const,
    steps: [
      {
        toolCalls: [
          { id: "before", name: "append_file", arguments: { path: `c-${i}.txt`, line: "before" } },
          { id: "nap", name: "sleep", arguments: { ms: 4_000 } },
          { id: "after", name: "append_file", arguments: { path: `c-${i}.txt`, line: "after" } },
        ],
      },
      { text: `done ${i}` },
    ],
  },
  tools: ["append_file", "sleep"],
});

describe("cancel while tools are running", () => {
  let fleet: FleetEnv;
  let client: FleetClient;
  let sweeper: RunningSweeper;
  let api: { url: string };

  beforeAll(async () => {
    fleet = await createFleetEnv("batch-cancel", { env: { SWEEPER_BACKOFF_MS: "300" } });
    ({ client, api } = await fleet.startApi());
    sweeper = await startSweeper({ ...loadConfig(fleet.env), logLevel: "silent" }, { serveMetrics: false });
    await fleet.spawnWorker({ WORKER_CONCURRENCY: "4" });
  }, 60_000);
  afterAll(async () => {
    await sweeper?.stop();
    await fleet?.close();
  });

  /** Every line every tool wrote so far, by file. */
  async function toolFiles(): Promise<Record<string, string>> {
    const dir = fleet.config.toolDir;
    const out: Record<string, string> = {};
    for (const name of (await readdir(dir)).sort()) out[name] = await readFile(join(dir, name), "utf8");
    return out;
  }

  it("aborts running tools, starts none after the cancel returned, drops queued runs, resumes nothing", async () => {
    const { sql } = fleet.database;
    const created = await client.createBatch(
      Array.from({ length: 12 }, (_, i) => ({ agent: agent(i), input: "go", customId: `k-${i}` })),
    );
    // Four sessions (the worker's slots) are inside `sleep`; eight wait in the queue.
    await waitFor(
      async () => {
        const [row] = await sql<{ n: number }[]>`
          select count(*)::int as n from messages where tool_call_id = 'before'`;
        return row!.n === 4;
      },
      20_000,
      "four sessions inside the sleep tool",
    );
    const queuedRun = created.sessions.find((s) => s.runId)!;
    const answer = await client.cancelBatch(created.id);
    const returnedAt = Date.now();
    const atReturn = await toolFiles();
    expect(Object.keys(atReturn)).toHaveLength(4);
    expect(answer.counts.total).toBe(12);
    expect(answer.cancelledAt).toBeDefined();

    // The running runs end promptly: the worker learns it from Redis and aborts the sleeps
    // (each one's result says "Cancelled while running" below; one that ran to its end would
    // say "slept 4000 ms").
    await waitFor(
      async () => {
        const [row] = await sql<{ n: number }[]>`select count(*)::int as n from runs where status <> 'ended'`;
        return row!.n === 0;
      },
      20_000,
      "every run ended",
    );

    // Past the sleeps' own end (4 s after each started, by Postgres's clock) and three wide
    // scans of the sweeper since (each would resume an interrupted session, after its 300 ms
    // backoff): nothing is resumed, no tool starts.
    const scans = vi.spyOn(sweeper.sweeper, "sweepInterrupted");
    try {
      await waitFor(
        async () => {
          const [row] = await sql<{ past: boolean }[]>`
            select now() > max(created_at) + interval '4 seconds' as past
              from messages where tool_call_id = 'before'`;
          return row!.past && scans.mock.calls.length >= 3;
        },
        20_000,
        "the sleeps' end and three sweeps",
      );
      // A scan is counted as it starts: one more, so the third has ended, and what it or a
      // sleep's end would have started (a resume after 300 ms, the next tool) has had a turn.
      const seen = scans.mock.calls.length;
      await waitFor(() => scans.mock.calls.length >= seen + 1, 10_000, "one more sweep");
    } finally {
      scans.mockRestore();
    }
    expect(await toolFiles()).toEqual(atReturn);
    for (const text of Object.values(atReturn)) expect(text.trim()).toBe("before");
    const runs = await sql<{ kind: string; ended_reason: string; status: string }[]>`
      select kind, ended_reason, status from runs`;
    expect(runs).toHaveLength(12);
    expect(runs.every((r) => r.kind === "run" && r.ended_reason === "cancelled")).toBe(true);
    const late = await sql`select 1 from runs where created_at > ${new Date(returnedAt).toISOString()}`;
    expect(late).toHaveLength(0);

    // The four that ran: the sleep was cancelled while running, the last call never started.
    const results = await sql<{ tool_call_id: string; content: string; success: boolean }[]>`
      select tool_call_id, content, success from messages where role = 'tool' order by session_id, seq`;
    const naps = results.filter((r) => r.tool_call_id === "nap");
    expect(naps).toHaveLength(4);
    for (const nap of naps) {
      expect(nap.success).toBe(false);
      expect(nap.content).toMatch(/^Cancelled while running/);
    }
    const afters = results.filter((r) => r.tool_call_id === "after");
    expect(afters).toHaveLength(4);
    for (const after of afters) expect(after.content).toBe(CANCELLED_BEFORE_START_TEXT);

    const batch = await client.getBatch(created.id);
    expect(batch.status).toBe("cancelled");
    expect(batch.counts).toMatchObject({ total: 12, cancelled: 12, queued: 0, running: 0 });
    expect(batch.endedAt).toBeDefined();
    for await (const result of client.batchResults(created.id)) expect(result.status).toBe("cancelled");

    // A queued run's job was removed from the queue.
    const queue = new Queue("runs", { connection: fleet.redis, prefix: fleet.config.prefix });
    const queuedRunIds = await sql<{ id: string }[]>`
      select r.id from runs r where r.started_at is null`;
    expect(queuedRunIds.length).toBe(8);
    for (const { id } of queuedRunIds) expect(await queue.getJob(`run-${id}`)).toBeUndefined();
    // Those eight never reached a worker: the API counted them, once each (the four that ran
    // are the worker's to count).
    const metrics = await (await fetch(`${api.url}/metrics`)).text();
    const cancelled = metrics.match(
      /^fleet_runs_total\{[^}]*kind="run"[^}]*outcome="cancelled"[^}]*\} (\d+)$/m,
    );
    expect(Number(cancelled?.[1])).toBe(8);
    await queue.close();
    expect(queuedRun).toBeDefined();
  }, 60_000);

  it("cancels one session (202); a new message re-opens it", async () => {
    const { id } = await client.createSession({ agent: agent(99) });
    await client.send(id, "go");
    await waitFor(
      async () => (await client.getSession(id)).messages.some((m) => m.role === "tool"),
      10_000,
      "inside the tool",
    );
    const cancelled = await client.cancelSession(id);
    expect(cancelled).toMatchObject({ id, cancelled: true });
    expect((await client.getSession(id)).status).toBe("cancelled");
    await waitFor(
      async () => (await client.getSession(id)).runs.every((r) => r.status === "ended"),
      20_000,
      "the running run aborted",
    );
    const ended = await client.getSession(id);
    expect(ended.runs.at(-1)?.endedReason).toBe("cancelled");
    // Aborted, not waited out: the sleep's result says so (one that ran to its end: "slept 4000 ms").
    expect(ended.messages.find((m) => m.role === "tool" && m.toolCallId === "nap")).toMatchObject({
      content: expect.stringMatching(/^Cancelled while running/),
    });
    expect((await client.resumePoint(id)).resumable).toBe(true);
    const { runId } = await client.send(id, "carry on");
    const run = await client.waitForRun(runId, { timeoutMs: 10_000 });
    expect(run.endedReason).toBe("completed");
    const session = await client.getSession(id);
    expect(session.status).toBe("completed");
    expect(session.messages.at(-1)).toMatchObject({ role: "assistant", content: "done 99" });
    // Cancelling what has ended changes nothing.
    expect(await client.cancelSession(id)).toMatchObject({ cancelled: false, status: "completed" });
  }, 30_000);

  it("cancelling a batch that has ended keeps it ended; an open one is closed and cancelled", async () => {
    const noInput = { model: { provider: "scripted" as const, steps: [{ text: "ok" }] } };
    // Sessions given no input are terminal at once: the batch has ended.
    const ended = await client.createBatch([{ agent: noInput }, { agent: noInput }]);
    const before = await client.getBatch(ended.id);
    expect(before).toMatchObject({ status: "ended", counts: { total: 2, completed: 2 } });
    const answer = await client.cancelBatch(ended.id);
    expect(answer.status).toBe("ended");
    expect(answer.cancelledAt).toBeUndefined();
    const after = await client.getBatch(ended.id);
    expect(after).toMatchObject({ status: "ended", endedAt: before.endedAt, counts: before.counts });
    expect(after.cancelledAt).toBeUndefined();
    // An open batch whose sessions have ended: the cancel stops its further parts.
    const open = await client.createBatch([{ agent: noInput }], { open: true });
    expect((await client.cancelBatch(open.id)).status).toBe("cancelled");
    expect(await client.getBatch(open.id)).toMatchObject({ status: "cancelled", open: false });
  }, 30_000);
});
