/**
 * Runs of one session are processed one after the other, in the order they were asked for,
 * even when several messages arrive at once and two worker processes compete for them.
 */
import { readFile } from "node:fs/promises";
import { join } from "node:path";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import type { FleetClient } from "../src/producer/client.js";
import type { ScriptedStep } from "../src/shared/agent-config.js";
import type { StoredMessage } from "../src/shared/messages.js";
import { createFleetEnv, type FleetEnv, seqsOf, waitFor } from "./support/fleet-env.js";

/** Steps for `turns` turns, each: a tool call appending a line, then a text answer. */
function turnSteps(turns: number, file: string, delayMs: number): ScriptedStep[] {
  const steps: ScriptedStep[] = [];
  for (let t = 0; t < turns; t++) {
    steps.push({
      delayMs,
      toolCalls: [{ name: "append_file", arguments: { path: file, line: `turn-${t}` } }],
    });
    steps.push({ delayMs, text: `answer-${t}` });
  }
  return steps;
}

type RunDbRow = {
  id: string;
  input: string | null;
  status: string;
  ended_reason: string | null;
  worker_id: string | null;
  /** Microseconds since the epoch (full database precision). */
  started_us: number;
  ended_us: number;
};

/**
 * Checks the history is `turns` whole turns, each user message followed by exactly one
 * turn (assistant with one call, its result, the text answer) before the next user message.
 */
function expectWholeTurns(messages: StoredMessage[], inputs: string[]): void {
  expect(seqsOf(messages)).toEqual(messages.map((_, i) => i + 1));
  expect(messages).toHaveLength(inputs.length * 4);
  for (const [t, input] of inputs.entries()) {
    const [user, call, result, answer] = messages.slice(t * 4, t * 4 + 4);
    expect(user).toMatchObject({ role: "user", content: input });
    expect(call).toMatchObject({ role: "assistant", stopReason: "tool_use" });
    if (call?.role !== "assistant") throw new Error("unreachable");
    expect(call.toolCalls).toHaveLength(1);
    expect(call.toolCalls![0]!.arguments).toMatchObject({ line: `turn-${t}` });
    expect(result).toMatchObject({
      role: "tool",
      toolCallId: call.toolCalls![0]!.id,
      success: true,
    });
    expect(answer).toMatchObject({ role: "assistant", content: `answer-${t}`, stopReason: "end_turn" });
  }
  // Every tool call is answered exactly once.
  const callIds = messages.flatMap((m) =>
    m.role === "assistant" ? (m.toolCalls ?? []).map((c) => c.id) : [],
  );
  const resultIds = messages.flatMap((m) => (m.role === "tool" ? [m.toolCallId] : []));
  expect(new Set(callIds).size).toBe(callIds.length);
  expect([...resultIds].sort()).toEqual([...callIds].sort());
}

/** Consecutive runs (in start order) never overlap in time. */
function expectNoOverlap(runs: RunDbRow[]): void {
  const started = [...runs].sort((a, b) => a.started_us - b.started_us);
  for (const run of started) expect(run.ended_us).toBeGreaterThanOrEqual(run.started_us);
  for (let i = 1; i < started.length; i++) {
    expect(started[i]!.started_us).toBeGreaterThanOrEqual(started[i - 1]!.ended_us);
  }
}

describe("runtime ordering with two worker processes", () => {
  let fleet: FleetEnv;
  let client: FleetClient;
  const workerIds: string[] = [];
  beforeAll(async () => {
    fleet = await createFleetEnv("ordering");
    ({ client } = await fleet.startApi());
    for (let i = 0; i < 2; i++) {
      const worker = await fleet.spawnWorker();
      const id = /fleet worker ready: (\S+),/.exec(worker.output())?.[1];
      expect(id).toBeDefined();
      workerIds.push(id!);
    }
  });
  afterAll(async () => fleet?.close());

  async function runsOf(sessionId: string): Promise<RunDbRow[]> {
    const rows = await fleet.database.sql<(RunDbRow & { started: string | null; ended: string | null })[]>`
      select id, input, status, ended_reason, worker_id,
             (extract(epoch from started_at) * 1000000)::bigint::text as started,
             (extract(epoch from ended_at) * 1000000)::bigint::text as ended
        from runs where session_id = ${sessionId} order by created_at, id`;
    return rows.map(({ started, ended, ...row }) => ({
      ...row,
      started_us: started === null ? Number.NaN : Number(started),
      ended_us: ended === null ? Number.NaN : Number(ended),
    }));
  }

  it("processes 5 concurrent sends to one session one after the other, without interleaving", async () => {
    const turns = 5;
    const { id } = await client.createSession({
      agent: {
        model: { provider: "scripted", steps: turnSteps(turns, "concurrent.txt", 50) },
        tools: ["append_file"],
      },
    });
    const sent = await Promise.all(Array.from({ length: turns }, (_, i) => client.send(id, `message ${i}`)));
    expect(new Set(sent.map((s) => s.runId)).size).toBe(turns);
    const ended = await Promise.all(sent.map((s) => client.waitForRun(s.runId, { timeoutMs: 30_000 })));
    expect(ended.map((r) => r.endedReason)).toEqual(Array(turns).fill("completed"));

    const runs = await runsOf(id);
    expect(runs).toHaveLength(turns);
    expect(runs.every((r) => r.status === "ended" && r.ended_reason === "completed")).toBe(true);
    expectNoOverlap(runs);
    // Concurrent requests have no defined order among themselves: the history follows the
    // order in which the runs started, one whole turn per run.
    const byStart = [...runs].sort((a, b) => a.started_us - b.started_us);
    const inputs = byStart.map((r) => r.input!);
    expect([...inputs].sort()).toEqual(Array.from({ length: turns }, (_, i) => `message ${i}`));

    const session = await client.getSession(id);
    expectWholeTurns(session.messages, inputs);
    // Each tool ran exactly once.
    const lines = (await readFile(join(fleet.config.toolDir, "concurrent.txt"), "utf8")).trim().split("\n");
    expect(lines).toEqual(Array.from({ length: turns }, (_, t) => `turn-${t}`));
    expect(session.status).toBe("completed");
  });

  it("two workers racing for one session with 10 queued runs never overlap and answer each call once", async () => {
    const turns = 10;
    const { id } = await client.createSession({
      agent: {
        model: { provider: "scripted", steps: turnSteps(turns, "race.txt", 20) },
        tools: ["append_file"],
      },
    });
    const runIds: string[] = [];
    for (let i = 0; i < turns; i++) runIds.push((await client.send(id, `race ${i}`)).runId);
    await waitFor(
      async () => (await runsOf(id)).every((r) => r.status === "ended"),
      40_000,
      "all 10 runs to end",
    );
    const runs = await runsOf(id);
    expect(runs.map((r) => r.id)).toEqual(runIds);
    expect(runs.map((r) => r.ended_reason)).toEqual(Array(turns).fill("completed"));
    for (const run of runs) expect(workerIds).toContain(run.worker_id);
    expectNoOverlap(runs);
    // Sent one after the other, they start in the order they were sent.
    const byStart = [...runs].sort((a, b) => a.started_us - b.started_us);
    expect(byStart.map((r) => r.id)).toEqual(runIds);

    const session = await client.getSession(id);
    expectWholeTurns(
      session.messages,
      runs.map((r) => r.input!),
    );
    expect(runs.map((r) => r.input)).toEqual(Array.from({ length: turns }, (_, i) => `race ${i}`));
    const lines = (await readFile(join(fleet.config.toolDir, "race.txt"), "utf8")).trim().split("\n");
    expect(lines).toEqual(Array.from({ length: turns }, (_, t) => `turn-${t}`));

    const [row] = await fleet.database.sql<{ lease_epoch: string; last_seq: number; tail_state: string }[]>`
      select lease_epoch, last_seq, tail_state from sessions where id = ${id}`;
    expect(Number(row!.lease_epoch)).toBeGreaterThanOrEqual(1);
    expect(row!.last_seq).toBe(turns * 4);
    expect(row!.tail_state).toBe("completed");
    // The one-result-per-call index held: no tool call has two results in the database.
    const dupes = await fleet.database.sql`
      select tool_call_id from messages where session_id = ${id} and role = 'tool'
       group by tool_call_id having count(*) > 1`;
    expect(dupes).toHaveLength(0);
  });
});
