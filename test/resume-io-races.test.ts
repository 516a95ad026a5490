/**
 * The I/O around the resume contract (resume-semantics.md §2–§5), against real Postgres and
 * Redis, the in-process API and a real `fleet worker` child: a resume asked for twice (and its
 * job delivered again), a resume racing a user message, a resume while the sweeper scans the
 * same session, and a resume of a session whose last run was cancelled. Each case checks the
 * contract's invariants on the stored history: seqs contiguous, every unanswered call answered
 * exactly once with the §3 text, the resume's instruction appended once, no tool run by a resume.
 */
import { randomUUID } from "node:crypto";
import { existsSync } from "node:fs";
import { join } from "node:path";
import type postgres from "postgres";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { FleetApiError, type FleetClient } from "../src/producer/client.js";
import type { Message, StoredMessage } from "../src/shared/messages.js";
import { QUEUES, RunQueues } from "../src/shared/queues.js";
import { CONTINUE_RESPONSE_TEXT } from "../src/shared/resume-plan.js";
import { resumePoint } from "../src/shared/resume-point.js";
import { createFleetEnv, type FleetEnv, seqsOf, type WorkerProcess, waitFor } from "./support/fleet-env.js";
import { CRASH_HISTORY } from "./support/histories.js";

/** resume-semantics.md §3, written out on purpose (not imported). */
const INTERRUPTED_LITERAL =
  "The process stopped while this tool was running, so it may or may not have completed, and whatever it changes may or may not have happened. Check the current state before running it again.";

/** An agent whose next answer (whatever step the history is at) is `text`. */
const answering = (text: string, tools: string[] = ["write_file"]) => ({
  model: { provider: "scripted" as const, steps: [{ text }] },
  tools,
});

/** The results stored for call `id` after the history's assistant step at `stepIndex`. */
function resultsFor(messages: readonly Message[], stepIndex: number, id: string): Message[] {
  const out: Message[] = [];
  for (let i = stepIndex + 1; i < messages.length && messages[i]!.role === "tool"; i++) {
    const m = messages[i]!;
    if (m.role === "tool" && m.toolCallId === id) out.push(m);
  }
  return out;
}

/** Invariants every stored history keeps, whatever raced. */
function expectWellFormed(messages: StoredMessage[]): void {
  expect(seqsOf(messages)).toEqual(messages.map((_, i) => i + 1));
  const point = resumePoint(messages);
  expect(point.resumable || point.reason).not.toBe("malformed");
}

async function settle(client: FleetClient, sessionId: string): Promise<void> {
  await waitFor(
    async () => (await client.getSession(sessionId)).runs.every((r) => r.status === "ended"),
    40_000,
    `every run of ${sessionId} to end`,
  );
}

describe("resume I/O against real Postgres, Redis and a worker", () => {
  let fleet: FleetEnv;
  let client: FleetClient;
  let worker: WorkerProcess;

  beforeAll(async () => {
    fleet = await createFleetEnv("resumeioraces");
    ({ client } = await fleet.startApi());
    worker = await fleet.spawnWorker();
  }, 90_000);
  afterAll(() => fleet?.close());

  it("a resume asked for twice, and its job delivered again, appends once", async () => {
    const { id } = await client.createSession({
      agent: answering("1 tool was interrupted"),
      messages: CRASH_HISTORY,
    });
    // Both requests at once: the second joins the first (one resume per session), or finds it
    // running (409 running); neither makes a second run.
    const answers = await Promise.all(
      [client.resume(id), client.resume(id)].map((p) => p.catch((e: unknown) => e)),
    );
    const accepted = answers.filter((a): a is { runId: string; kind: string } => !(a instanceof Error));
    expect(accepted.length).toBeGreaterThanOrEqual(1);
    for (const a of accepted) expect(a).toEqual({ runId: accepted[0]!.runId, kind: "recover_tools" });
    for (const a of answers.filter((a) => a instanceof Error))
      expect((a as FleetApiError).reason).toBe("running");
    const run = await client.waitForRun(accepted[0]!.runId, { timeoutMs: 30_000 });
    expect(run.endedReason).toBe("completed");

    // The same job again (a queue that delivers twice): the session job finds nothing queued.
    const before = await client.getSession(id);
    const queues = new RunQueues(fleet.redis, fleet.config.prefix);
    try {
      const payload = { sessionId: id, runId: run.id };
      const job = await queues.resumes.add("resume", payload, {
        jobId: `${QUEUES.resumes.jobId(payload)}-again`,
      });
      await waitFor(
        async () => (await job.isCompleted()) || (await job.isFailed()),
        30_000,
        "the replayed job",
      );
    } finally {
      await queues.close();
    }
    const after = await client.getSession(id);
    expect(after.messages).toEqual(before.messages);
    expect(after.runs.filter((r) => r.kind === "resume")).toHaveLength(1);

    const messages = after.messages;
    expectWellFormed(messages);
    expect(messages.map((m) => m.role)).toEqual(["user", "assistant", "tool", "tool", "assistant"]);
    expect(resultsFor(messages, 1, "a")).toHaveLength(1);
    expect(resultsFor(messages, 1, "b")).toEqual([
      expect.objectContaining({ content: INTERRUPTED_LITERAL, success: false, name: "write_file" }),
    ]);
    expect(messages.at(-1)).toMatchObject({ content: "1 tool was interrupted", stopReason: "end_turn" });
    // No tool ran: the resume answered b, it did not write it.
    expect(existsSync(join(fleet.config.toolDir, "b.txt"))).toBe(false);
    const again = await client.resume(id).catch((e: unknown) => e);
    expect(again).toBeInstanceOf(FleetApiError);
    expect((again as FleetApiError).reason).toBe("completed");
  }, 90_000);

  it("a resume racing a user message: b is answered once, the message is kept, nothing is malformed", async () => {
    for (let round = 0; round < 4; round++) {
      const { id } = await client.createSession({ agent: answering("ok"), messages: CRASH_HISTORY });
      const racing = [client.resume(id), client.send(id, `next ${round}`)];
      // Half the rounds send the message first.
      if (round % 2 === 1) racing.reverse();
      const answers = await Promise.all(racing.map((p) => p.catch((e: unknown) => e)));
      // The message is never refused. The resume is refused `running` while the message's run
      // is queued or running, or `completed` when that run had already answered (a CI run once
      // delayed the resume's request that long): nothing is left to resume either way.
      const [resumeAnswer, sendAnswer] = round % 2 === 1 ? [answers[1], answers[0]] : answers;
      expect(sendAnswer).not.toBeInstanceOf(Error);
      if (resumeAnswer instanceof Error)
        expect(["running", "completed"]).toContain((resumeAnswer as FleetApiError).reason);
      await settle(client, id);
      const session = await client.getSession(id);
      const messages = session.messages;
      expectWellFormed(messages);
      expect(resultsFor(messages, 1, "a")).toHaveLength(1);
      expect(resultsFor(messages, 1, "b")).toEqual([
        expect.objectContaining({ content: INTERRUPTED_LITERAL, success: false }),
      ]);
      // The message was accepted: it is in the history once, and was answered.
      const sent = !(answers[round % 2 === 1 ? 0 : 1] instanceof Error);
      expect(sent).toBe(true);
      expect(messages.filter((m) => m.role === "user" && m.content === `next ${round}`)).toHaveLength(1);
      expect(messages.at(-1)).toMatchObject({ role: "assistant", stopReason: "end_turn" });
      expect(existsSync(join(fleet.config.toolDir, "b.txt"))).toBe(false);
      // An accepted resume was queued before the message's run (after it, it is refused
      // `running`), so it runs first and resumes (contracts §12): it never ends
      // nothing_to_resume, whichever request's transaction began first
      // (test/run-queue-order.test.ts holds one open on purpose).
      const resumed = !(answers[round % 2 === 1 ? 1 : 0] instanceof Error);
      expect(session.runs.map((r) => r.kind)).toEqual(resumed ? ["resume", "run"] : ["run"]);
      for (const r of session.runs) expect(r.endedReason, JSON.stringify(r)).toBe("completed");
    }
  }, 180_000);

  /**
   * Asks for a resume of `id` while `write` (a transaction that locks the session's row first)
   * is held uncommitted; lets it commit once the resume's queueing waits on the row. The
   * request has read the history and the runs before the write commits. Its answer, or error.
   */
  async function resumeDuring(id: string, write: (tx: postgres.TransactionSql) => Promise<void>) {
    const { sql } = fleet.database;
    let release!: () => void;
    const held = new Promise<void>((resolve) => (release = resolve));
    let written!: () => void;
    const isWritten = new Promise<void>((resolve) => (written = resolve));
    const writing = sql.begin(async (tx) => {
      await tx`select 1 from sessions where id = ${id} for no key update`;
      await write(tx);
      written();
      await held;
    });
    await isWritten;
    const resuming = client.resume(id).catch((e: unknown) => e);
    await waitFor(
      async () =>
        (
          await sql`select 1 from pg_stat_activity where wait_event_type = 'Lock' and datname = current_database()`
        ).length > 0,
      20_000,
      "the resume to wait on the session's row",
    );
    release();
    await writing;
    return resuming;
  }

  it("a resume whose request read no run, while a message's run was being queued, is refused as running", async () => {
    const { sql } = fleet.database;
    const { id } = await client.createSession({ agent: answering("ok"), messages: CRASH_HISTORY });
    // A message's run being queued as the API's createRun does it: the session's row, then the
    // insert, not yet committed. The resume's request reads the runs meanwhile and sees none.
    const runId = randomUUID();
    const answer = await resumeDuring(id, async (tx) => {
      await tx`insert into runs (id, session_id, tenant, kind, trigger, input)
               values (${runId}, ${id}, 'default', 'run', 'api', 'next')`;
    });
    // A run of the session was queued when the resume was: 409 running (contracts §12), not a
    // 202 whose run later finds the message's answer and ends nothing_to_resume.
    expect(answer).toBeInstanceOf(FleetApiError);
    expect((answer as FleetApiError).status).toBe(409);
    expect((answer as FleetApiError).reason).toBe("running");
    const runs = await sql`select kind from runs where session_id = ${id}`;
    expect(runs).toEqual([{ kind: "run" }]);
    await sql`update runs set status = 'ended', ended_reason = 'cancelled' where id = ${runId}`;
  }, 60_000);

  it("a resume asked for on a history a run's last append was completing is refused completed", async () => {
    const { sql } = fleet.database;
    const { id } = await client.createSession({
      agent: answering("ok"),
      messages: [{ role: "user", content: "hi" }],
    });
    // A worker's last append, as its statement makes it: the session's row, the message, the
    // tail state; not yet committed when the resume's request reads the history ([user]:
    // call_model) and the runs (none active).
    const answer = await resumeDuring(id, async (tx) => {
      await tx`insert into messages (session_id, seq, role, content, stop_reason)
               values (${id}, 2, 'assistant', 'hello', 'end_turn')`;
      await tx`update sessions set last_seq = 2, tail_state = 'completed' where id = ${id}`;
    });
    // Not a 202 whose run would find the answer and end nothing_to_resume (onError hooks run).
    expect(answer).toBeInstanceOf(FleetApiError);
    expect((answer as FleetApiError).status).toBe(409);
    expect((answer as FleetApiError).reason).toBe("completed");
    expect(await sql`select 1 from runs where session_id = ${id}`).toHaveLength(0);
  }, 60_000);

  it("a resume while the sweeper scans the same interrupted session runs once", async () => {
    const sweeper = await fleet.spawnSweeper({ SWEEP_INTERVAL_MS: "50", SWEEPER_BACKOFF_MS: "0" });
    try {
      for (let round = 0; round < 3; round++) {
        const { id } = await client.createSession({ agent: answering("recovered"), messages: CRASH_HISTORY });
        // A run of it started and its worker died: the sweeper resumes it on its own.
        await fleet.database
          .sql`update sessions set run_started = true, tail_state = 'awaiting_tools' where id = ${id}`;
        const asked = await client.resume(id).catch((e: unknown) => e);
        if (asked instanceof Error) expect((asked as FleetApiError).reason).toMatch(/^(running|completed)$/);
        await waitFor(
          async () => (await client.getSession(id)).messages.at(-1)?.role === "assistant",
          40_000,
          "the resume's answer",
        );
        await settle(client, id);
        const session = await client.getSession(id);
        expectWellFormed(session.messages);
        expect(session.messages.map((m) => m.role)).toEqual([
          "user",
          "assistant",
          "tool",
          "tool",
          "assistant",
        ]);
        expect(resultsFor(session.messages, 1, "b")).toHaveLength(1);
        const started = session.runs.filter((r) => r.endedReason !== "nothing_to_resume");
        expect(started, JSON.stringify(session.runs)).toHaveLength(1);
        expect(session.status).toBe("completed");
      }
    } finally {
      sweeper.child.kill("SIGTERM");
      await sweeper.exited;
    }
  }, 180_000);

  it("a cancelled run's session resumes at call_model, the cancelled tool is not run again", async () => {
    const { id } = await client.createSession({
      agent: {
        model: {
          provider: "scripted",
          steps: [
            { toolCalls: [{ id: "s", name: "sleep", arguments: { ms: 20_000 } }] },
            { text: "after the cancel" },
          ],
        },
        tools: ["sleep"],
      },
    });
    const { runId } = await client.send(id, "sleep a while");
    await waitFor(
      async () => (await client.getSession(id)).messages.some((m) => m.role === "assistant"),
      30_000,
      "the sleep call to start",
    );
    await client.cancelSession(id);
    const cancelled = await client.waitForRun(runId, { timeoutMs: 30_000 });
    expect(cancelled.endedReason).toBe("cancelled");
    const stopped = await client.getSession(id);
    expect(stopped.status).toBe("cancelled");
    expectWellFormed(stopped.messages);
    expect(stopped.messages.map((m) => m.role)).toEqual(["user", "assistant", "tool"]);
    expect(stopped.messages[2]).toMatchObject({ toolCallId: "s", success: false });
    expect(await client.resumePoint(id)).toMatchObject({ resumable: true, kind: "call_model" });

    const resumed = await client.resume(id);
    expect(resumed.kind).toBe("call_model");
    const run = await client.waitForRun(resumed.runId, { timeoutMs: 30_000 });
    expect(run.endedReason).toBe("completed");
    const session = await client.getSession(id);
    expectWellFormed(session.messages);
    expect(session.messages.map((m) => m.role)).toEqual(["user", "assistant", "tool", "assistant"]);
    expect(session.messages.at(-1)).toMatchObject({ content: "after the cancel", stopReason: "end_turn" });
    expect(session.status).toBe("completed");
  }, 90_000);

  it("a resume cancelled while the model answers is resumed again without a second instruction", async () => {
    const partial: Message[] = [
      { role: "user", content: "write a long essay" },
      { role: "assistant", content: "It was a dark and", stopReason: "max_output" },
    ];
    const { id } = await client.createSession({
      agent: {
        model: {
          provider: "scripted",
          steps: [{ text: "unused" }, { text: " stormy night.", delayMs: 20_000 }],
        },
      },
      messages: partial,
    });
    const first = await client.resume(id);
    expect(first.kind).toBe("continue_response");
    await waitFor(
      async () => (await client.getSession(id)).messages.length === 3,
      30_000,
      "the continue instruction to be stored",
    );
    await client.cancelSession(id);
    expect((await client.waitForRun(first.runId, { timeoutMs: 30_000 })).endedReason).toBe("cancelled");
    const stopped = await client.getSession(id);
    expect(stopped.messages.at(-1)).toMatchObject({ role: "internal", content: CONTINUE_RESPONSE_TEXT });
    expect(await client.resumePoint(id)).toMatchObject({ resumable: true, kind: "call_model" });

    const second = await client.resume(id, {
      model: { provider: "scripted", steps: [{ text: "unused" }, { text: " stormy night." }] },
    });
    expect(second.kind).toBe("call_model");
    expect((await client.waitForRun(second.runId, { timeoutMs: 30_000 })).endedReason).toBe("completed");
    const session = await client.getSession(id);
    expectWellFormed(session.messages);
    expect(session.messages.map((m) => m.role)).toEqual(["user", "assistant", "internal", "assistant"]);
    expect(session.messages.filter((m) => m.content === CONTINUE_RESPONSE_TEXT)).toHaveLength(1);
    expect(session.messages.at(-1)).toMatchObject({ content: " stormy night.", stopReason: "end_turn" });
    expect(worker.child.exitCode).toBeNull();
  }, 90_000);
});
