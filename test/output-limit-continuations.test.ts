/**
 * Automatic continuations of answers cut by the output limit (`max_output` →
 * `continue_response`), against a real fleet (Postgres, Redis, a `fleet worker` child) with a
 * Sweeper driven by the test: a continuation that stored new text is progress (no backoff,
 * the count starts again), one that stored nothing is counted and ends `attempts_exhausted`,
 * and the continuations of one request are bounded by the agent's `maxTurns`.
 */
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import type { FleetClient } from "../src/producer/client.js";
import type { ScriptedStep } from "../src/shared/agent-config.js";
import { RunQueues } from "../src/shared/queues.js";
import { CONTINUE_RESPONSE_TEXT } from "../src/shared/resume-plan.js";
import type { ResumePolicy } from "../src/shared/resume-policy.js";
import type { Sweeper } from "../src/sweeper/sweeper.js";
import { createFleetEnv, type FleetEnv } from "./support/fleet-env.js";
import { sweeperOf } from "./support/stalled-run.js";

type Row = {
  status: string;
  parked_reason: string | null;
  resume_attempts: number;
  /**
   * `next_resume_at` less the latest run's `created_at`, ms (rounded up: the policy's times are
   * whole ms): the backoff alone when that resume waits for nothing.
   */
  ahead_ms: number | null;
};

type LatestRun = { id: string; kind: string; resume_kind: string | null };

/** A Sweeper driven by the test, and the queues it enqueues resumes on. */
type TestSweeper = { sweeper: Sweeper; own: RunQueues };

describe("continuations of answers cut by the output limit", () => {
  let fleet: FleetEnv;
  let client: FleetClient;
  const queues: RunQueues[] = [];

  function makeSweeper(policy: Partial<ResumePolicy>): TestSweeper {
    const own = new RunQueues(fleet.redis, fleet.config.prefix);
    queues.push(own);
    return { sweeper: sweeperOf(fleet, own, { policy }), own };
  }

  /** The session's resume count, and how far its next resume is placed after its latest run. */
  async function row(id: string): Promise<Row> {
    const [r] = await fleet.database.sql<Row[]>`
      select s.status, s.parked_reason, s.resume_attempts,
             ceil(extract(epoch from s.next_resume_at - (select max(created_at) from runs where session_id = s.id)) * 1000)::float8 as ahead_ms
        from sessions s where s.id = ${id}`;
    return r!;
  }

  async function latestRun(id: string): Promise<LatestRun> {
    const [r] = await fleet.database.sql<LatestRun[]>`
      select id, kind, resume_kind from runs where session_id = ${id} order by created_at desc, id desc limit 1`;
    return r!;
  }

  /**
   * Sweeps until the session is parked or completed, each resume run to its end first; returns
   * the sweeps that resumed. `each` reads what the sweep left before the worker may start the
   * resume's job: the queues are paused until it returns (a completed run resets the count
   * and the next resume's time; on a loaded machine the worker ended the last continuation
   * before `each` read them, and it read `resume_attempts: 0`, `ahead_ms: null`).
   */
  async function sweepToTheEnd(
    { sweeper, own }: TestSweeper,
    id: string,
    each?: (n: number) => Promise<void>,
  ): Promise<number> {
    let resumed = 0;
    for (let i = 0; i < 30; i++) {
      const { status } = await client.getSession(id);
      if (status === "completed" || status === "parked") return resumed;
      const before = (await latestRun(id)).id;
      await Promise.all(own.all().map((queue) => queue.pause()));
      let run: LatestRun;
      try {
        await sweeper.sweepInterrupted();
        run = await latestRun(id);
        if (run.id !== before) await each?.(resumed + 1);
      } finally {
        await Promise.all(own.all().map((queue) => queue.resume()));
      }
      if (run.id === before) continue;
      resumed++;
      await client.waitForRun(run.id, { timeoutMs: 20_000 });
    }
    throw new Error(`session ${id} still active after 30 sweeps`);
  }

  beforeAll(async () => {
    fleet = await createFleetEnv("maxoutput");
    client = (await fleet.startApi()).client;
    await fleet.spawnWorker();
  });
  afterAll(async () => {
    for (const queue of queues) await queue.close();
    await fleet?.close();
  });

  it("continues a long answer part after part, each at once, past SWEEPER_MAX_ATTEMPTS", async () => {
    const parts = 7;
    const steps: ScriptedStep[] = [
      ...Array.from({ length: parts }, (_, i) => ({ text: `part ${i}.`, stopReason: "max_output" })),
      { text: " The end." },
    ];
    const { id } = await client.createSession({ agent: { model: { provider: "scripted", steps } } });
    const { runId } = await client.send(id, "Write a long story");
    expect((await client.waitForRun(runId)).endedReason).toBe("max_output");

    // A backoff no test would wait out: a continuation that waited for one never starts.
    const backoffBaseMs = 600_000;
    const sweeper = makeSweeper({ maxAttempts: 3, backoffBaseMs, backoffMaxMs: backoffBaseMs });
    const resumed = await sweepToTheEnd(sweeper, id, async () => {
      // Each continuation is the first of a new count, placed at once: its next resume is
      // exactly one first backoff after it (a counted one would wait for the previous backoff).
      expect(await row(id)).toMatchObject({ status: "active", resume_attempts: 1, ahead_ms: backoffBaseMs });
      expect(await latestRun(id)).toMatchObject({ kind: "resume", resume_kind: "continue_response" });
    });
    expect(resumed).toBe(parts);

    const session = await client.getSession(id);
    expect(session.status).toBe("completed");
    expect(session.runs.map((r) => [r.kind, r.endedReason])).toEqual([
      ["run", "max_output"],
      ...Array.from({ length: parts - 1 }, () => ["resume", "max_output"]),
      ["resume", "completed"],
    ]);
    const assistant = session.messages.filter((m) => m.role === "assistant").map((m) => m.content);
    expect(assistant.join("")).toBe(`${steps.map((s) => s.text).join("")}`);
    expect(session.messages.filter((m) => m.role === "internal").map((m) => m.content)).toEqual(
      Array.from({ length: parts }, () => CONTINUE_RESPONSE_TEXT),
    );
  }, 120_000);

  it("parks a model that keeps filling its output limit with nothing (attempts_exhausted)", async () => {
    const sweeper = makeSweeper({ maxAttempts: 3, backoffBaseMs: 1 });
    for (const text of ["", " \n "]) {
      const { id } = await client.createSession({
        agent: { model: { provider: "scripted", steps: [{ text, stopReason: "max_output" }] } },
      });
      const { runId } = await client.send(id, "Write a long story");
      expect((await client.waitForRun(runId)).endedReason).toBe("max_output");
      const counted: number[] = [];
      await sweepToTheEnd(sweeper, id, async () => {
        counted.push((await row(id)).resume_attempts);
      });
      // The first continuation follows a step of the run (the count's start); those after it added nothing.
      expect(counted).toEqual([1, 2, 3]);
      expect(await row(id)).toMatchObject({
        status: "parked",
        parked_reason:
          "attempts_exhausted: 3 automatic resumes made no progress; the last run ended max_output",
      });
    }
  }, 120_000);

  it("bounds the continuations of one request by maxTurns; an explicit resume starts them again", async () => {
    const { id } = await client.createSession({
      agent: {
        maxTurns: 4,
        model: { provider: "scripted", steps: [{ text: "more", stopReason: "max_output" }] },
      },
    });
    const { runId } = await client.send(id, "Never stop");
    expect((await client.waitForRun(runId)).endedReason).toBe("max_output");
    const sweeper = makeSweeper({ maxAttempts: 3, backoffBaseMs: 1 });
    expect(await sweepToTheEnd(sweeper, id)).toBe(4);
    expect(await row(id)).toMatchObject({
      status: "parked",
      parked_reason:
        "max_turns: 4 automatic continuations of a response cut by the output limit (maxTurns 4)",
    });

    const asked = await client.resume(id);
    expect(asked.kind).toBe("continue_response");
    expect((await client.waitForRun(asked.runId)).endedReason).toBe("max_output");
    expect(await sweepToTheEnd(sweeper, id)).toBe(4);
    expect((await row(id)).parked_reason).toMatch(/^max_turns: 4 automatic continuations/);
    const session = await client.getSession(id);
    expect(session.runs).toHaveLength(1 + 4 + 1 + 4);
  }, 120_000);
});
