/**
 * Limits that always hold (contracts.md §12), through the real API, real worker processes
 * and an in-process sweeper: output Postgres cannot store, `maxTurns`, `agent.budget` across
 * crashes, imports that run nothing, and resumes refused while a run is on its way.
 */
import { randomBytes } from "node:crypto";
import { readFile } from "node:fs/promises";
import { join } from "node:path";
import { afterAll, beforeAll, describe, expect, it, vi } from "vitest";
import type { FleetApiError, FleetClient } from "../src/producer/client.js";
import { loadConfig } from "../src/shared/config.js";
import { type RunningSweeper, startSweeper } from "../src/sweeper/sweeper-process.js";
import { createFleetEnv, type FleetEnv, type WorkerProcess, waitFor } from "./support/fleet-env.js";
import { CRASH_HISTORY } from "./support/histories.js";

const MAX_ATTEMPTS = 3;

describe("limits that always hold", () => {
  let fleet: FleetEnv;
  let client: FleetClient;
  let sweeper: RunningSweeper;
  let worker: WorkerProcess;

  beforeAll(async () => {
    fleet = await createFleetEnv("limits");
    ({ client } = await fleet.startApi());
    const env = { ...fleet.env, SWEEPER_MAX_ATTEMPTS: String(MAX_ATTEMPTS), SWEEPER_BACKOFF_MS: "100" };
    fleet.env.SWEEPER_MAX_ATTEMPTS = env.SWEEPER_MAX_ATTEMPTS;
    fleet.env.SWEEPER_BACKOFF_MS = env.SWEEPER_BACKOFF_MS;
    sweeper = await startSweeper({ ...loadConfig(env), logLevel: "silent" }, { serveMetrics: false });
    worker = await fleet.spawnWorker();
  });
  afterAll(async () => {
    await sweeper?.stop();
    await fleet?.close();
  });

  async function terminal(id: string, timeoutMs = 20_000) {
    let last = await client.getSession(id);
    await waitFor(
      async () => {
        last = await client.getSession(id);
        return last.status === "completed" || last.status === "parked";
      },
      timeoutMs,
      `session ${id} to end`,
    );
    return last;
  }

  it("a model answer holding a NUL byte is stored with U+FFFD: one run, completed", async () => {
    const { id } = await client.createSession({
      agent: { model: { provider: "scripted", steps: [{ text: "bin\u0000ary" }] } },
    });
    await client.send(id, "answer with a NUL");
    const session = await terminal(id);
    expect(session.status).toBe("completed");
    expect(session.messages.at(-1)?.content).toBe("bin\uFFFDary");
    expect(session.runs).toHaveLength(1);
  });

  it("a stream cut inside a surrogate pair, again and again, is parked within SWEEPER_MAX_ATTEMPTS + 1 runs", async () => {
    const { id } = await client.createSession({
      agent: { model: { provider: "scripted", steps: [{ text: "abc😀xyz", fault: "stream_cut" }] } },
    });
    await client.send(id, "go");
    const session = await terminal(id, 30_000);
    expect(session.status).toBe("parked");
    expect(session.parkedReason).toMatch(
      /^attempts_exhausted: 3 automatic resumes made no progress; the last run ended interrupted/,
    );
    expect(session.runs.length).toBeLessThanOrEqual(MAX_ATTEMPTS + 1);
    const answers = session.messages.filter((m) => m.role === "assistant");
    expect(answers.length).toBe(session.runs.length); // one model call per run, no more
    for (const answer of answers) {
      expect(answer).toMatchObject({ stopReason: "interrupted" });
      expect(answer.content).not.toMatch(/[\uD800-\uDFFF]/); // no lone half of the pair
    }
    expect(answers.some((a) => a.content.includes("\uFFFD"))).toBe(true);
    // Parked means parked: nothing more happens.
    await new Promise((r) => setTimeout(r, 1_000));
    expect((await client.getSession(id)).runs).toHaveLength(session.runs.length);
  }, 40_000);

  it("a provider that pauses for ever is parked attempts_exhausted, its last run ended paused, within SWEEPER_MAX_ATTEMPTS + 1 runs", async () => {
    // resume-semantics §2: a step paused at the pause limit is resumed call_model; §5: the
    // sweeper's resumes are bounded, and a session that keeps stopping at one point is parked.
    const { id } = await client.createSession({
      agent: {
        model: { provider: "scripted", steps: [{ text: "still searching", stopReason: "paused" }] },
        pauseLimit: 1,
      },
    });
    await client.send(id, "find it");
    const session = await terminal(id, 30_000);
    expect(session.status).toBe("parked");
    expect(session.parkedReason).toBe(
      `attempts_exhausted: ${MAX_ATTEMPTS} automatic resumes made no progress; the last run ended paused`,
    );
    expect(session.runs).toHaveLength(MAX_ATTEMPTS + 1);
    expect(session.runs.map((r) => [r.kind, r.resumeKind, r.endedReason])).toEqual([
      ["run", null, "paused"],
      ...Array.from({ length: MAX_ATTEMPTS }, () => ["resume", "call_model", "paused"]),
    ]);
    // Each run called the model pauseLimit + 1 times; a resume adds nothing of its own.
    expect(session.messages.map((m) => m.role)).toEqual([
      "user",
      ...Array.from({ length: 2 * (MAX_ATTEMPTS + 1) }, () => "assistant"),
    ]);
    // Parked means parked: nothing more happens.
    await new Promise((r) => setTimeout(r, 1_000));
    expect((await client.getSession(id)).runs).toHaveLength(MAX_ATTEMPTS + 1);
  }, 40_000);

  it("a session that progresses before every failure is parked max_turns after maxTurns automatic resumes", async () => {
    // Each run has a tool run to its end, then its answer breaks, alternately by a fault and by
    // the output limit: every resume moved the session on (contracts §12 starts the attempt count
    // again), so SWEEPER_MAX_ATTEMPTS never parks it; maxTurns bounds one request's resumes.
    const tool = { toolCalls: [{ name: "append_file", arguments: { path: "progress.txt", line: "ran" } }] };
    const breaks = [
      { text: "half", fault: "stream_cut" as const },
      { text: "a part", stopReason: "max_output" },
    ];
    const steps = Array.from({ length: 12 }, (_, i) => [tool, breaks[i % 2]!]).flat();
    const { id } = await client.createSession({
      agent: { model: { provider: "scripted", steps }, tools: ["append_file"], maxTurns: 4 },
    });
    await client.send(id, "go");
    const session = await terminal(id, 30_000);
    expect(session.status).toBe("parked");
    expect(session.parkedReason).toBe(
      "max_turns: 4 automatic resumes since the latest run asked for (maxTurns 4)",
    );
    expect(session.runs.map((r) => [r.kind, r.resumeKind, r.endedReason])).toEqual([
      ["run", null, "interrupted"],
      ["resume", "retry_response", "max_output"],
      ["resume", "continue_response", "interrupted"],
      ["resume", "retry_response", "max_output"],
      ["resume", "continue_response", "interrupted"],
    ]);
    // One tool run per run, each once: 5 lines, 5 results, none answered by the runtime.
    const lines = (await readFile(join(fleet.config.toolDir, "progress.txt"), "utf8")).trim().split("\n");
    expect(lines).toEqual(Array.from({ length: 5 }, () => "ran"));
    const results = session.messages.filter((m) => m.role === "tool");
    expect(results.map((m) => m.success)).toEqual([true, true, true, true, true]);
    await new Promise((r) => setTimeout(r, 1_000));
    expect((await client.getSession(id)).runs).toHaveLength(5);
  }, 40_000);

  it("maxTurns: 2 on a looping script: exactly one run, two model calls, parked max_turns", async () => {
    const { id } = await client.createSession({
      agent: {
        model: {
          provider: "scripted",
          steps: [{ toolCalls: [{ name: "append_file", arguments: { path: "loop.txt", line: "again" } }] }],
        },
        tools: ["append_file"],
        maxTurns: 2,
      },
    });
    await client.send(id, "loop");
    const session = await terminal(id);
    expect(session.status).toBe("parked");
    expect(session.parkedReason).toMatch(/^max_turns/);
    expect(session.runs).toHaveLength(1);
    expect(session.runs[0]!.endedReason).toBe("max_turns");
    expect(session.messages.filter((m) => m.role === "assistant")).toHaveLength(2);
    await new Promise((r) => setTimeout(r, 1_000));
    expect((await client.getSession(id)).runs).toHaveLength(1); // never resumed automatically
    // An explicit resume continues it: another full maxTurns.
    const { runId } = await client.resume(id);
    const resumed = await client.waitForRun(runId, { timeoutMs: 15_000 });
    expect(resumed.endedReason).toBe("max_turns");
    expect((await client.getSession(id)).messages.filter((m) => m.role === "assistant")).toHaveLength(4);
  });

  it("budget.maxTokens holds when the provider reports no usage: unknown usage counts as an estimate, not 0", async () => {
    // The scripted model reports no usage, like a provider that sends none.
    const { id } = await client.createSession({
      agent: {
        model: {
          provider: "scripted",
          steps: [
            {
              toolCalls: [{ name: "append_file", arguments: { path: "tokens.txt", line: "x".repeat(300) } }],
            },
          ],
        },
        tools: ["append_file"],
        maxTurns: 50,
        budget: { maxTokens: 400 },
      },
    });
    await client.send(id, "loop");
    const session = await terminal(id);
    expect(session.status).toBe("parked");
    expect(session.parkedReason).toMatch(/^budget_exhausted: agent.budget.maxTokens/);
    const steps = session.messages.filter((m) => m.role === "assistant");
    expect(steps.length).toBeGreaterThan(0);
    expect(steps.length).toBeLessThan(10);
    expect(steps.every((m) => m.usage === null)).toBe(true);
    const [row] = await fleet.database.sql<
      { tokens_used: string }[]
    >`select tokens_used from sessions where id = ${id}`;
    expect(Number(row!.tokens_used)).toBeGreaterThanOrEqual(400);
  });

  it("budget.maxTokens holds when every answer is cut short: an interrupted step counts as an estimate, not 0", async () => {
    // Each attempt streams about half of 600 characters, then breaks: billed by a provider,
    // though no usage arrives. Counted as 0, the session would be resumed until its attempts
    // ran out (attempts_exhausted); counted, it stops at the budget.
    const { id } = await client.createSession({
      agent: {
        model: { provider: "scripted", steps: [{ text: "y".repeat(600), fault: "stream_cut" }] },
        budget: { maxTokens: 150 },
      },
    });
    await client.send(id, "talk");
    const session = await terminal(id, 30_000);
    expect(session.status).toBe("parked");
    expect(session.parkedReason).toMatch(/^budget_exhausted: agent.budget.maxTokens/);
    const steps = session.messages.filter((m) => m.role === "assistant");
    expect(steps.length).toBeGreaterThan(0);
    expect(steps.length).toBeLessThan(MAX_ATTEMPTS + 1);
    for (const step of steps) expect(step).toMatchObject({ stopReason: "interrupted" });
    const [row] = await fleet.database.sql<
      { tokens_used: string }[]
    >`select tokens_used from sessions where id = ${id}`;
    expect(Number(row!.tokens_used)).toBeGreaterThanOrEqual(150);
  });

  it("budget.maxModelCalls: 5 holds across a send, two SIGKILLs and their resumes", async () => {
    const { id } = await client.createSession({
      agent: {
        model: {
          provider: "scripted",
          steps: [{ toolCalls: [{ name: "sleep", arguments: { ms: 1_500 } }] }],
        },
        tools: ["sleep"],
        budget: { maxModelCalls: 5 },
      },
    });
    await client.send(id, "sleep forever");
    const { sql } = fleet.database;
    for (let kill = 0, calls = 0; kill < 2; kill++) {
      // Wait until the session is inside a new `sleep` (a call without its result), then kill its worker.
      await waitFor(
        async () => {
          const [row] = await sql<{ calls: number; results: number }[]>`
            select (select count(*)::int from messages where session_id = ${id} and role = 'assistant') as calls,
                   (select count(*)::int from messages where session_id = ${id} and role = 'tool') as results`;
          if (row!.calls <= calls || row!.calls <= row!.results) return false;
          calls = row!.calls;
          return true;
        },
        15_000,
        "the session inside sleep",
      );
      worker.child.kill("SIGKILL");
      await worker.exited;
      worker = await fleet.spawnWorker();
    }
    const session = await terminal(id, 30_000);
    expect(session.status).toBe("parked");
    expect(session.parkedReason).toMatch(/^budget_exhausted: agent.budget.maxModelCalls/);
    const [row] = await sql<{ model_calls: number }[]>`select model_calls from sessions where id = ${id}`;
    expect(row!.model_calls).toBe(5);
    expect(session.messages.filter((m) => m.role === "assistant").length).toBeLessThanOrEqual(5);
    expect(session.runs.filter((r) => r.endedReason === "crashed")).toHaveLength(2);
  }, 60_000);

  it("an imported §7.2 crash history runs nothing; then the §7.2 flow passes", async () => {
    const { id } = await client.createSession({
      agent: {
        model: { provider: "scripted", steps: [{ text: "(unused)" }, { text: "1 tool was interrupted" }] },
        tools: ["write_file"],
      },
      messages: CRASH_HISTORY,
    });
    // Two whole scans of the sweeper for interrupted sessions after the import (once a fixed
    // 5 s): a scan starts only when the tick before it ended, so when the one after those two
    // starts, both looked at this session and did all they would.
    const scans = vi.spyOn(sweeper.sweeper, "sweepInterrupted");
    try {
      const before = scans.mock.calls.length;
      await waitFor(() => scans.mock.calls.length >= before + 3, 15_000, "two sweeps after the import");
    } finally {
      scans.mockRestore();
    }
    const untouched = await client.getSession(id);
    expect(untouched.messages).toHaveLength(CRASH_HISTORY.length);
    expect(untouched.runs).toEqual([]);

    const point = await client.resumePoint(id);
    expect(point).toMatchObject({ resumable: true, kind: "recover_tools" });
    expect(point.resumable && point.unansweredToolCalls.map((c) => c.id)).toEqual(["b"]);
    const { runId, kind } = await client.resume(id);
    expect(kind).toBe("recover_tools");
    await client.waitForRun(runId, { timeoutMs: 15_000 });
    const session = await client.getSession(id);
    expect(session.messages.at(-1)).toMatchObject({ role: "assistant", content: "1 tool was interrupted" });
    expect(await client.resumePoint(id)).toEqual({ resumable: false, reason: "completed" });
  }, 30_000);

  it("a resume whose first messages Postgres refuses ends storage_rejected at once: one run, parked, nothing appended", async () => {
    const agent = {
      model: { provider: "scripted" as const, steps: [{ text: "never asked" }] },
      tools: ["write_file"],
    };
    const { id } = await client.createSession({
      agent,
      messages: [
        { role: "user", content: "write" },
        {
          role: "assistant",
          content: "",
          stopReason: "tool_use",
          toolCalls: [{ id: "c", name: "write_file", arguments: { path: "a", content: "a" } }],
        },
      ],
    });
    // An id the API would now refuse, as a row written before that check holds it: the
    // interrupted result that answers it is more than Postgres can index (SQLSTATE 54000).
    const long = randomBytes(9_000).toString("base64url").slice(0, 9_000); // incompressible
    await fleet.database.sql`
      update messages set tool_calls = jsonb_set(tool_calls, '{0,id}', to_jsonb(${long}::text))
       where session_id = ${id} and role = 'assistant'`;
    const { kind, runId } = await client.resume(id);
    expect(kind).toBe("recover_tools");
    await client.waitForRun(runId, { timeoutMs: 15_000 });
    const session = await client.getSession(id);
    expect(session).toMatchObject({ status: "parked" });
    expect(session.parkedReason).toMatch(/^storage_rejected: .*index row/);
    // Postgres's words, without the names of the schema's objects (index "messages_…"):
    // the tenant reads them; the worker's log keeps them.
    for (const text of [session.parkedReason, session.runs[0]?.error])
      expect(text).not.toMatch(/(index|constraint|relation|table|column) "[^"…]/);
    expect(session.runs).toHaveLength(1);
    expect(session.runs[0]).toMatchObject({
      kind: "resume",
      status: "ended",
      endedReason: "storage_rejected",
    });
    expect(session.messages).toHaveLength(2);
  });

  it("a write Postgres refuses for a constraint: the tenant reads its words without the schema's names", async () => {
    const agent = {
      model: { provider: "scripted" as const, steps: [{ text: "never asked" }] },
      tools: ["write_file"],
    };
    const { id } = await client.createSession({
      agent,
      messages: [
        { role: "user", content: "write" },
        {
          role: "assistant",
          content: "",
          stopReason: "tool_use",
          toolCalls: [{ id: "c", name: "write_file", arguments: { path: "a", content: "a" } }],
        },
      ],
    });
    // A check of the operator's on this session's messages (this file's own database):
    // Postgres refuses the resume's result for the interrupted call in its own words, which
    // name the table and the constraint (SQLSTATE 23514, check_violation).
    await fleet.database.sql.unsafe(`
      create or replace function refuse_results() returns trigger language plpgsql as $$
      begin
        if new.session_id = '${id}' and new.role = 'tool' then
          raise exception 'new row for relation "messages" violates check constraint "messages_ops_guard_check"'
            using errcode = '23514';
        end if;
        return new;
      end $$;
      create trigger refuse_results before insert on messages for each row execute function refuse_results();`);
    try {
      const { runId } = await client.resume(id);
      await client.waitForRun(runId, { timeoutMs: 15_000 });
    } finally {
      await fleet.database.sql.unsafe("drop trigger refuse_results on messages");
    }
    const session = await client.getSession(id);
    expect(session.runs[0]).toMatchObject({ endedReason: "storage_rejected" });
    expect(session.parkedReason).toMatch(
      /^storage_rejected: new row for relation .* violates check constraint/,
    );
    // Before: `… relation "messages" violates check constraint "messages_ops_guard_check"`.
    for (const text of [session.parkedReason, session.runs[0]?.error])
      expect(text).not.toMatch(/messages_ops_guard_check|"messages"/);
  });

  it("while a run is on its way: resume-point says running, POST /resume answers 409 running", async () => {
    const { id } = await client.createSession({
      agent: {
        model: {
          provider: "scripted",
          steps: [{ toolCalls: [{ name: "sleep", arguments: { ms: 1_500 } }] }, { text: "awake" }],
        },
        tools: ["sleep"],
      },
    });
    const { runId } = await client.send(id, "nap");
    await waitFor(async () => (await client.getSession(id)).messages.length >= 2, 10_000, "the nap to start");
    expect(await client.resumePoint(id)).toEqual({ resumable: false, reason: "running" });
    const refused = await client.resume(id).catch((error: FleetApiError) => error);
    expect(refused).toMatchObject({ status: 409, reason: "running" });
    await client.waitForRun(runId, { timeoutMs: 15_000 });
    expect(await client.resumePoint(id)).toEqual({ resumable: false, reason: "completed" });
  });

  it("a waiting resume is joined only by the same request; another model gets 409", async () => {
    const history = [{ role: "user" as const, content: "question" }];
    const agent = { model: { provider: "scripted" as const, steps: [{ text: "answer" }] } };
    const { id } = await client.createSession({ agent, messages: history });
    // Hold the queue so the resume waits.
    const { RunQueues } = await import("../src/shared/queues.js");
    const queues = new RunQueues(fleet.redis, fleet.config.prefix);
    const queue = queues.resumes;
    await queue.pause();
    try {
      const first = await client.resume(id);
      const same = await client.resume(id);
      expect(same.runId).toBe(first.runId);
      const other = { provider: "scripted" as const, steps: [{ text: "from another model" }] };
      const refused = await client.resume(id, { model: other }).catch((error: FleetApiError) => error);
      expect(refused).toMatchObject({ status: 409, reason: "running" });
    } finally {
      await queue.resume();
      await queues.close();
    }
    expect((await terminal(id)).messages.at(-1)).toMatchObject({ content: "answer" });
  });

  it("a resume that joins a waiting run whose job Redis lost gives it its job again at once", async () => {
    const history = [{ role: "user" as const, content: "question" }];
    const agent = { model: { provider: "scripted" as const, steps: [{ text: "answer" }] } };
    const { id } = await client.createSession({ agent, messages: history });
    const { QUEUES, RunQueues } = await import("../src/shared/queues.js");
    const queues = new RunQueues(fleet.redis, fleet.config.prefix);
    try {
      await queues.resumes.pause();
      const first = await client.resume(id);
      const jobId = QUEUES.resumes.jobId({ sessionId: id, runId: first.runId });
      expect(await queues.resumes.remove(jobId)).toBe(1);
      await queues.resumes.resume();
      // Joining it re-adds the job now; the sweeper would only look at a run 5 s old.
      const again = await client.resume(id);
      expect(again.runId).toBe(first.runId);
      const run = await client.waitForRun(first.runId, { timeoutMs: 4_000 });
      expect(run).toMatchObject({ status: "ended", endedReason: "completed" });
    } finally {
      await queues.resumes.resume();
      await queues.close();
    }
  });
});
