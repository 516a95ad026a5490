/**
 * The sweeper's policy against a real fleet (Postgres, Redis, a `fleet worker` child):
 * bounded automatic resumes that end in parking, parking of sessions that cannot be
 * resumed, continue/retry of cut responses, fallback models, re-enqueueing of queued runs
 * whose job is lost, and the metrics a sweeper-triggered resume leaves behind.
 *
 * Crash states are created directly (imported histories, rows written with SQL) and most
 * sweeps are driven by calling the Sweeper's methods, so each test decides when it sweeps.
 */
import { existsSync } from "node:fs";
import { join } from "node:path";
import pino from "pino";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import type { FleetClient } from "../src/producer/client.js";
import { type AgentConfigInput, parseAgentConfig } from "../src/shared/agent-config.js";
import { loadConfig } from "../src/shared/config.js";
import { SessionLease } from "../src/shared/lease.js";
import type { Message } from "../src/shared/messages.js";
import { createMetrics, type FleetMetrics } from "../src/shared/metrics.js";
import { QUEUES, RunQueues } from "../src/shared/queues.js";
import { CONTINUE_RESPONSE_TEXT, RETRY_RESPONSE_TEXT } from "../src/shared/resume-plan.js";
import { DEFAULT_RESUME_POLICY, type ResumePolicy } from "../src/shared/resume-policy.js";
import { PRIMARY_REJECTED_PREFIX } from "../src/shared/run-outcomes.js";
import { AutomaticResumes } from "../src/shared/store/automatic-resumes.js";
import { SessionQueries } from "../src/shared/store/session-queries.js";
import { SweepQueries } from "../src/sweeper/sweep-queries.js";
import { Sweeper } from "../src/sweeper/sweeper.js";
import { type RunningSweeper, startSweeper } from "../src/sweeper/sweeper-process.js";
import { createFleetEnv, type FleetEnv, type WorkerProcess, waitFor } from "./support/fleet-env.js";
import { parseSamples, sampleValue } from "./support/metric-samples.js";
import { aWholeWideScan } from "./support/sweeps.js";

type RunDbRow = {
  id: string;
  kind: string;
  trigger: string;
  resume_kind: string | null;
  status: string;
  ended_reason: string | null;
  model: { provider: string; steps?: { text?: string }[] } | null;
};

/** Messages as a read gives them back: an assistant message's unknown usage is `null` (contracts §13). */
const readBack = (messages: readonly Message[]): Message[] =>
  messages.map((m) => (m.role === "assistant" ? { ...m, usage: m.usage ?? null } : m));

describe("sweeper policy", () => {
  let fleet: FleetEnv;
  let client: FleetClient;
  let apiUrl: string;
  let worker: WorkerProcess;
  let queries: SessionQueries;
  const queues: RunQueues[] = [];

  /** A Sweeper driven by the test (no timer), with its own metrics. */
  function makeSweeper(
    policy: Partial<ResumePolicy> = {},
    /** What Redis says of each job's standing, instead of asking it. */
    jobStates?: RunQueues["jobStates"],
  ): { sweeper: Sweeper; metrics: FleetMetrics } {
    const metrics = createMetrics("sweeper");
    const own = new RunQueues(fleet.redis, fleet.config.prefix);
    queues.push(own);
    if (jobStates) own.jobStates = jobStates;
    const sweeper = new Sweeper({
      prefix: fleet.config.prefix,
      redis: fleet.redis,
      lease: new SessionLease(fleet.redis, fleet.config.prefix, fleet.config.leaseTtlMs),
      queries,
      sweeps: new SweepQueries(fleet.database),
      queues: own,
      metrics,
      resumes: new AutomaticResumes(
        fleet.database,
        { ...DEFAULT_RESUME_POLICY, backoffBaseMs: 100, ...policy },
        metrics,
      ),
      log: pino({ level: "silent" }),
    });
    return { sweeper, metrics };
  }

  async function startBackgroundSweeper(maxAttempts: number): Promise<RunningSweeper> {
    return startSweeper(
      {
        ...loadConfig({
          ...fleet.env,
          SWEEPER_MAX_ATTEMPTS: String(maxAttempts),
          SWEEPER_BACKOFF_MS: "100",
        }),
        logLevel: "silent",
      },
      { serveMetrics: false },
    );
  }

  async function runsOf(sessionId: string): Promise<RunDbRow[]> {
    return fleet.database.sql<RunDbRow[]>`
      select id, kind, trigger, resume_kind, status, ended_reason, model from runs
       where session_id = ${sessionId} order by created_at, id`;
  }

  async function waitForStatus(sessionId: string, status: string, timeoutMs = 20_000): Promise<void> {
    await waitFor(
      async () => (await client.getSession(sessionId)).status === status,
      timeoutMs,
      `session ${sessionId} ${status}`,
    ).catch(async (error) => {
      console.log(await client.getSession(sessionId));
      throw error;
    });
  }

  /**
   * A session whose history a run left behind: imported, then marked as run (an imported
   * history alone runs nothing, contracts §12), as if its worker had stopped right there.
   */
  async function importSession(agent: AgentConfigInput, messages: Message[]): Promise<string> {
    const { id } = await client.createSession({ agent, messages });
    await fleet.database.sql`update sessions set run_started = true where id = ${id}`;
    return id;
  }

  beforeAll(async () => {
    fleet = await createFleetEnv("sweeppolicy");
    const started = await fleet.startApi();
    client = started.client;
    apiUrl = started.api.url;
    queries = new SessionQueries(fleet.database);
    worker = await fleet.spawnWorker();
  });
  afterAll(async () => {
    for (const queue of queues) await queue.close();
    await fleet?.close();
  });

  it("resumes a session whose model keeps failing, then parks it after SWEEPER_MAX_ATTEMPTS", async () => {
    const running = await startBackgroundSweeper(3);
    try {
      const { id } = await client.createSession({
        agent: { model: { provider: "scripted", steps: [{ fault: "connection" }] } },
      });
      await client.send(id, "hello?");
      await waitForStatus(id, "parked", 30_000);

      const session = await client.getSession(id);
      expect(session.parkedReason).toMatch(/^attempts_exhausted/);
      expect(session.runs.map((r) => r.kind)).toEqual(["run", "resume", "resume", "resume"]);
      for (const run of session.runs) {
        expect(run.status).toBe("ended");
        expect(run.endedReason).toBe("provider_error");
      }
      for (const run of session.runs.slice(1)) {
        expect(run).toMatchObject({ trigger: "sweeper", resumeKind: "call_model" });
      }
      // The model never answered: no assistant message, and nothing was added by the resumes.
      expect(session.messages.map((m) => m.role)).toEqual(["user"]);

      // Counted by the parker once it has announced the park (its events written, its debt
      // cleared: park-announcements.ts), a moment after the status reads parked.
      const parkedCount = async () =>
        sampleValue(
          await running.metrics.registry.getSingleMetricAsString("fleet_sessions_parked_total"),
          "fleet_sessions_parked_total",
          { reason: "attempts_exhausted" },
        );
      await waitFor(async () => ((await parkedCount()) ?? 0) >= 1, 10_000, "the park to be counted");
      expect(await parkedCount()).toBe(1);

      // Parked means parked: the running sweeper adds nothing more.
      await new Promise((r) => setTimeout(r, 600));
      expect(await runsOf(id)).toHaveLength(4);
    } finally {
      await running.stop();
    }
  }, 45_000);

  it("parks refused, context_full, unknown-stop and malformed sessions without resuming them", async () => {
    const endings = [
      { stopReason: "refusal", outcome: "refused", parked: /^refused$/ },
      { stopReason: "context_full", outcome: "context_full", parked: /^context_full$/ },
      { stopReason: "weird_stop", outcome: "unknown_stop", parked: /^unknown_stop: weird_stop$/ },
    ];
    const ids: string[] = [];
    for (const ending of endings) {
      const { id } = await client.createSession({
        agent: {
          model: { provider: "scripted", steps: [{ text: "not this time", stopReason: ending.stopReason }] },
        },
      });
      const { runId } = await client.send(id, "please");
      const run = await client.waitForRun(runId, { timeoutMs: 15_000 });
      expect(run.endedReason).toBe(ending.outcome);
      ids.push(id);
    }
    const malformedId = await importSession({ model: { provider: "scripted", steps: [{ text: "x" }] } }, [
      { role: "user", content: "hi" },
      { role: "tool", toolCallId: "nobody-asked", name: "write_file", content: "?", success: true },
    ]);

    const { sweeper, metrics } = makeSweeper();
    const result = await sweeper.sweepInterrupted();
    expect(result.resumed).toBe(0);
    expect(result.parked).toBeGreaterThanOrEqual(4);
    // A second sweep finds nothing left to do.
    expect(await sweeper.sweepInterrupted()).toEqual({ resumed: 0, parked: 0 });

    for (const [i, ending] of endings.entries()) {
      const session = await client.getSession(ids[i]!);
      expect(session.status).toBe("parked");
      expect(session.parkedReason).toMatch(ending.parked);
      expect(session.runs.map((r) => r.kind)).toEqual(["run"]);
    }
    const malformed = await client.getSession(malformedId);
    expect(malformed.status).toBe("parked");
    expect(malformed.parkedReason).toMatch(/^malformed: /);
    expect(malformed.runs).toEqual([]);

    const text = await metrics.registry.getSingleMetricAsString("fleet_sessions_parked_total");
    for (const reason of ["refused", "context_full", "unknown_stop", "malformed"])
      expect(sampleValue(text, "fleet_sessions_parked_total", { reason })).toBe(1);

    // Even later, with the full tick (abandoned, interrupted, orphaned), no resume appears.
    await sweeper.tick();
    const [row] = await fleet.database.sql<{ n: number }[]>`
      select count(*)::int as n from runs where kind = 'resume' and session_id in ${fleet.database.sql([...ids, malformedId])}`;
    expect(row!.n).toBe(0);
  }, 40_000);

  it("continues a response cut by the output limit, or parks it when the agent says so", async () => {
    const history: Message[] = [
      { role: "user", content: "Write a long story" },
      { role: "assistant", content: "Once upon a time, the", stopReason: "max_output" },
    ];
    const steps = [{ text: "(unused)" }, { text: " end." }];
    const continuing = await importSession({ model: { provider: "scripted", steps } }, history);
    const parking = await importSession(
      { model: { provider: "scripted", steps }, continueOnMaxOutput: false },
      history,
    );

    const { sweeper } = makeSweeper();
    const result = await sweeper.sweepInterrupted();
    expect(result).toEqual({ resumed: 1, parked: 1 });

    await waitForStatus(continuing, "completed");
    const done = await client.getSession(continuing);
    expect(done.messages.map(({ seq, createdAt, ...m }) => m)).toEqual([
      ...readBack(history),
      { role: "internal", content: CONTINUE_RESPONSE_TEXT },
      { role: "assistant", content: " end.", stopReason: "end_turn", usage: null },
    ]);
    expect(done.runs).toHaveLength(1);
    expect(done.runs[0]).toMatchObject({
      kind: "resume",
      trigger: "sweeper",
      resumeKind: "continue_response",
      endedReason: "completed",
    });

    const parked = await client.getSession(parking);
    expect(parked.status).toBe("parked");
    expect(parked.parkedReason).toBe("max_output");
    expect(parked.runs).toEqual([]);
    expect(parked.messages).toHaveLength(2);
  });

  it("retries a response cut by a stream fault, keeping the partial response", async () => {
    const history: Message[] = [
      { role: "user", content: "Explain fencing" },
      { role: "assistant", content: "Fencing is a tech", stopReason: "interrupted" },
    ];
    const id = await importSession(
      { model: { provider: "scripted", steps: [{ text: "(unused)" }, { text: "Fencing is a technique." }] } },
      history,
    );
    const { sweeper } = makeSweeper();
    expect(await sweeper.sweepInterrupted()).toEqual({ resumed: 1, parked: 0 });
    await waitForStatus(id, "completed");

    const session = await client.getSession(id);
    expect(session.messages.map(({ seq, createdAt, ...m }) => m)).toEqual([
      ...readBack(history),
      { role: "internal", content: RETRY_RESPONSE_TEXT },
      { role: "assistant", content: "Fencing is a technique.", stopReason: "end_turn", usage: null },
    ]);
    expect(session.runs).toHaveLength(1);
    expect(session.runs[0]).toMatchObject({
      kind: "resume",
      trigger: "sweeper",
      resumeKind: "retry_response",
      endedReason: "completed",
    });
  });

  it("a cut step that carried half-formed tool calls is retried or continued, its calls neither run nor answered", async () => {
    // resume-semantics §2/§3: calls of a step cut by a fault or the output limit were never
    // executed and are owed no result; the resume keeps the step and adds only its instruction.
    const halfCall = (path: string) => [
      { id: `half-${path}`, name: "write_file", arguments: { path, content: "x" } },
    ];
    const endings = [
      {
        stopReason: "interrupted",
        path: "cut-fault.txt",
        instruction: RETRY_RESPONSE_TEXT,
        kind: "retry_response",
      },
      {
        stopReason: "max_output",
        path: "cut-limit.txt",
        instruction: CONTINUE_RESPONSE_TEXT,
        kind: "continue_response",
      },
    ];
    const sessions: { id: string; history: Message[] }[] = [];
    for (const ending of endings) {
      const history: Message[] = [
        { role: "user", content: `Write ${ending.path}` },
        {
          role: "assistant",
          content: "I'll write",
          toolCalls: halfCall(ending.path),
          stopReason: ending.stopReason,
        },
      ];
      const id = await importSession(
        {
          model: { provider: "scripted", steps: [{ text: "(unused)" }, { text: "Not written." }] },
          tools: ["write_file"],
        },
        history,
      );
      sessions.push({ id, history });
    }
    const { sweeper } = makeSweeper();
    expect(await sweeper.sweepInterrupted()).toEqual({ resumed: 2, parked: 0 });
    for (const [i, ending] of endings.entries()) {
      const { id, history } = sessions[i]!;
      await waitForStatus(id, "completed");
      const session = await client.getSession(id);
      expect(session.messages.map(({ seq, createdAt, ...m }) => m)).toEqual([
        ...readBack(history),
        { role: "internal", content: ending.instruction },
        { role: "assistant", content: "Not written.", stopReason: "end_turn", usage: null },
      ]);
      expect(session.runs.map((r) => [r.kind, r.resumeKind, r.endedReason])).toEqual([
        ["resume", ending.kind, "completed"],
      ]);
      expect(existsSync(join(fleet.config.toolDir, ending.path))).toBe(false);
    }
  });

  it("parks a session whose provider rejects the request at once (provider_rejected), without resumes", async () => {
    const running = await startBackgroundSweeper(3);
    try {
      const { id } = await client.createSession({
        agent: { model: { provider: "scripted", steps: [{ fault: "rejected" }] } },
      });
      await client.send(id, "hello?");
      await waitForStatus(id, "parked", 30_000);

      const session = await client.getSession(id);
      expect(session.parkedReason).toBe(
        "provider_rejected: scripted fault: 401 the provider rejected the request",
      );
      expect(session.runs).toHaveLength(1);
      expect(session.runs[0]).toMatchObject({ kind: "run", status: "ended", endedReason: "provider_error" });
      expect(session.messages.map((m) => m.role)).toEqual(["user"]);
      // The sweeper, which keeps running, adds nothing in a whole pass: parked means parked.
      await aWholeWideScan(running);
      expect(await runsOf(id)).toHaveLength(1);
      const [row] = await fleet.database.sql<{ resume_attempts: number }[]>`
        select resume_attempts from sessions where id = ${id}`;
      expect(row!.resume_attempts).toBe(0);
    } finally {
      await running.stop();
    }
  }, 45_000);

  it("with a fallback model, a rejecting primary is not parked, nor retried: the fallback answers at once", async () => {
    const running = await startBackgroundSweeper(5);
    try {
      const { id } = await client.createSession({
        agent: {
          model: { provider: "scripted", steps: [{ fault: "rejected" }] },
          fallbackModels: [{ provider: "scripted", steps: [{ text: "from fallback" }] }],
        },
      });
      await client.send(id, "anyone there?");
      await waitForStatus(id, "completed", 30_000);
      const runs = await runsOf(id);
      // The run on the primary, then one resume on the fallback: the primary is not called
      // again (the sweeper's policy would have tried it fallbackAfter times). The worker asks
      // for it, unless the sweeper's scan sees the ended run first: the run's stored error
      // says the primary was refused for good, so the sweeper's resume is on the fallback too.
      expect(runs.map((r) => [r.kind, r.ended_reason])).toEqual([
        ["run", "provider_error"],
        ["resume", "completed"],
      ]);
      const [first] = await fleet.database.sql<{ error: string }[]>`
        select error from runs where id = ${runs[0]!.id}`;
      expect(first!.error.startsWith(PRIMARY_REJECTED_PREFIX)).toBe(true);
      expect(runs.at(-1)).toMatchObject({ resume_kind: "call_model" });
      expect(["worker", "sweeper"]).toContain(runs.at(-1)!.trigger);
      expect(runs.at(-1)!.model?.steps?.[0]?.text).toBe("from fallback");
      const session = await client.getSession(id);
      expect(session.messages.map((m) => [m.role, m.content])).toEqual([
        ["user", "anyone there?"],
        ["assistant", "from fallback"],
      ]);
    } finally {
      await running.stop();
    }
  }, 45_000);

  it("falls back to the agent's fallback model when the primary keeps failing", async () => {
    const running = await startBackgroundSweeper(5);
    try {
      const { id } = await client.createSession({
        agent: {
          model: { provider: "scripted", steps: [{ fault: "connection" }] },
          fallbackModels: [{ provider: "scripted", steps: [{ text: "from fallback" }] }],
        },
      });
      await client.send(id, "anyone there?");
      await waitForStatus(id, "completed", 30_000);

      const session = await client.getSession(id);
      expect(session.messages.at(-1)).toMatchObject({
        role: "assistant",
        content: "from fallback",
        stopReason: "end_turn",
      });
      const runs = await runsOf(id);
      const resumes = runs.filter((r) => r.kind === "resume");
      const viaFallback = resumes.filter((r) => r.model?.steps?.[0]?.text === "from fallback");
      expect(viaFallback.length).toBeGreaterThanOrEqual(1);
      // The primary is tried `fallbackAfter` times by the sweeper before the fallback is used.
      expect(resumes.slice(0, DEFAULT_RESUME_POLICY.fallbackAfter).map((r) => r.model)).toEqual(
        Array(DEFAULT_RESUME_POLICY.fallbackAfter).fill(null),
      );
      expect(runs.at(-1)).toMatchObject({ kind: "resume", trigger: "sweeper", ended_reason: "completed" });
      expect(runs.at(-1)!.model?.steps?.[0]?.text).toBe("from fallback");
      for (const run of runs.slice(0, -1)) expect(run.ended_reason).toBe("provider_error");
      // A completed run resets the count of automatic attempts.
      const [row] = await fleet.database.sql<{ resume_attempts: number; status: string }[]>`
        select resume_attempts, status from sessions where id = ${id}`;
      expect(row).toEqual({ resume_attempts: 0, status: "active" });
    } finally {
      await running.stop();
    }
  }, 45_000);

  it("a send to a parked session makes it active again and runs it", async () => {
    const id = await importSession(
      {
        model: {
          provider: "scripted",
          steps: [{ text: "no", stopReason: "refusal" }, { text: "ok, here it is" }],
        },
      },
      [
        { role: "user", content: "do the thing" },
        { role: "assistant", content: "no", stopReason: "refusal" },
      ],
    );
    const { sweeper } = makeSweeper();
    await sweeper.sweepInterrupted();
    expect((await client.getSession(id)).status).toBe("parked");

    // New input is someone acting on the session: it is active again, attempts start over.
    const { runId } = await client.send(id, "please, it is fine");
    const run = await client.waitForRun(runId, { timeoutMs: 15_000 });
    expect(run.endedReason).toBe("completed");
    const session = await client.getSession(id);
    expect(session.messages.at(-1)).toMatchObject({ role: "assistant", content: "ok, here it is" });
    expect(session.tailState).toBe("completed");
    expect(session.status).toBe("completed");
    expect(session.parkedReason).toBeNull();
  });

  it("re-enqueues a queued run whose job is missing, once", async () => {
    const { id } = await queries.createSession({
      agent: parseAgentConfig({ model: { provider: "scripted", steps: [{ text: "orphan answered" }] } }),
    });
    const { run } = await queries.createRun({ sessionId: id, kind: "run", trigger: "api", input: "hello" });
    const own = new RunQueues(fleet.redis, fleet.config.prefix);
    queues.push(own);
    const queue = own.runs;
    const jobId = QUEUES.runs.jobId({ sessionId: id, runId: run.id });
    expect(await queue.getJob(jobId)).toBeUndefined();

    const { sweeper } = makeSweeper();
    // Too young: its producer may still be about to enqueue it.
    expect(await sweeper.sweepOrphanedRuns()).toBe(0);
    await fleet.database.sql`update runs set created_at = now() - interval '10 seconds' where id = ${run.id}`;

    // Keep the worker from taking the job, to see the second sweep leave an existing job alone.
    await queue.pause();
    try {
      expect(await sweeper.sweepOrphanedRuns()).toBe(1);
      const job = await queue.getJob(jobId);
      expect(job?.data).toEqual({ sessionId: id, runId: run.id });
      expect(await job!.getState()).toBe("waiting");
      expect(await sweeper.sweepOrphanedRuns()).toBe(0);
      expect(await queue.getJobs(["waiting", "delayed", "active"])).toHaveLength(1);
    } finally {
      await queue.resume();
    }
    const ended = await client.waitForRun(run.id, { timeoutMs: 15_000 });
    expect(ended.endedReason).toBe("completed");
    expect((await client.getSession(id)).messages.at(-1)).toMatchObject({ content: "orphan answered" });
    expect(await sweeper.sweepOrphanedRuns()).toBe(0);
  });

  it("a delayed automatic resume whose job Redis lost is re-added for the rest of its backoff", async () => {
    const id = await importSession(
      { model: { provider: "scripted", steps: [{ text: "after the backoff" }] } },
      [{ role: "user", content: "question" }],
    );
    // The second attempt: it waits until the first one's backoff ends, 4 s from now (Postgres's clock).
    await fleet.database.sql`
      update sessions set resume_attempts = 1, next_resume_at = now() + interval '4 seconds' where id = ${id}`;
    const policy = { ...DEFAULT_RESUME_POLICY, backoffBaseMs: 3_000 };
    const resumes = new AutomaticResumes(fleet.database, policy, createMetrics("sweeper"));
    const scheduled = await resumes.schedule({ sessionId: id, trigger: "worker" });
    expect(scheduled).toMatchObject({ action: "resume", attempt: 2 });
    if (scheduled.action !== "resume") return;
    expect(scheduled.delayMs).toBeGreaterThan(3_500);
    // Its job is never added: Redis lost it while it was delayed.
    const [{ run_at: runAt } = { run_at: "" }] = await fleet.database.sql<{ run_at: string }[]>`
      select (next_resume_at - interval '6 seconds')::text as run_at from sessions where id = ${id}`;
    const { sweeper } = makeSweeper(policy);
    expect(await sweeper.sweepOrphanedRuns(0)).toBe(1);
    const own = new RunQueues(fleet.redis, fleet.config.prefix);
    queues.push(own);
    const job = await own.resumes.getJob(QUEUES.runs.jobId({ sessionId: id, runId: scheduled.run.id }));
    expect(await job!.getState()).toBe("delayed");
    expect(job!.opts.delay).toBeGreaterThan(3_000);
    expect(job!.opts.delay).toBeLessThanOrEqual(4_000);
    expect((await client.waitForRun(scheduled.run.id, { timeoutMs: 20_000 })).endedReason).toBe("completed");
    // It started once its backoff had ended, both times read on Postgres's clock.
    const [row] = await fleet.database.sql<{ early_ms: number }[]>`
      select extract(epoch from (${runAt}::timestamptz - started_at)) * 1000 as early_ms from runs
       where id = ${scheduled.run.id}`;
    expect(Number(row!.early_ms)).toBeLessThan(50);
  });

  it("a queued run whose job finished is retried once, counted; one that started meanwhile is left alone", async () => {
    const agent = parseAgentConfig({ model: { provider: "scripted", steps: [{ text: "late" }] } });
    const make = async () => {
      const { id } = await queries.createSession({ agent });
      const { run } = await queries.createRun({ sessionId: id, kind: "run", trigger: "api", input: "hi" });
      await fleet.database
        .sql`update runs set created_at = now() - interval '10 seconds' where id = ${run.id}`;
      return { id, run };
    };
    const started = await make();
    const waiting = await make();
    // Both jobs "finished" as far as Redis knows; only `waiting`'s run is still queued in Postgres.
    await fleet.database
      .sql`update runs set status = 'running', started_at = now() where id = ${started.run.id}`;
    const mine = new Set([started.run.id, waiting.run.id]);
    const { sweeper } = makeSweeper({}, async (_name, jobIds) =>
      jobIds.map((jobId) => ([...mine].some((runId) => jobId.includes(runId)) ? "finished" : "pending")),
    );
    const attempts = async (id: string) =>
      (
        await fleet.database.sql<{ n: number }[]>`select resume_attempts as n from sessions where id = ${id}`
      )[0]!.n;
    // The worker waits until the count is read: the run it completes resets it to 0 (on a
    // loaded machine it did so before the read, and the count read 0).
    const own = new RunQueues(fleet.redis, fleet.config.prefix);
    queues.push(own);
    await Promise.all([own.runs.pause(), own.resumes.pause()]);
    try {
      expect(await sweeper.sweepOrphanedRuns()).toBe(1);
      expect(await attempts(started.id)).toBe(0);
      expect(await attempts(waiting.id)).toBe(1);
    } finally {
      await Promise.all([own.runs.resume(), own.resumes.resume()]);
    }
    expect((await client.waitForRun(waiting.run.id, { timeoutMs: 15_000 })).endedReason).toBe("completed");
    await fleet.database
      .sql`update runs set status = 'ended', ended_reason = 'crashed', ended_at = now() where id = ${started.run.id}`;
  });

  it("a sweeper-triggered resume shows in the worker's metrics, with no ids in any label", async () => {
    const id = await importSession({ model: { provider: "scripted", steps: [{ text: "answer" }] } }, [
      { role: "user", content: "question" },
    ]);
    const { sweeper, metrics } = makeSweeper();
    expect(await sweeper.sweepInterrupted()).toEqual({ resumed: 1, parked: 0 });
    await waitForStatus(id, "completed");

    const port = /metrics on port (\d+)/.exec(worker.output())?.[1];
    expect(port).toBeDefined();
    const response = await fetch(`http://127.0.0.1:${port}/metrics`);
    expect(response.status).toBe(200);
    const text = await response.text();
    expect(text).toContain('fleet_resumes_total{kind="call_model",trigger="sweeper"');
    expect(
      sampleValue(text, "fleet_resumes_total", { kind: "call_model", trigger: "sweeper" }),
    ).toBeGreaterThan(0);
    expect(sampleValue(text, "fleet_runs_total", { kind: "resume", outcome: "completed" })).toBeGreaterThan(
      0,
    );

    // Every id this file created, against every label value of the worker's metrics.
    const sessions = await fleet.database.sql<{ id: string }[]>`select id from sessions`;
    const runs = await fleet.database.sql<
      { id: string; job_id: string | null }[]
    >`select id, job_id from runs`;
    const ids = new Set([
      ...sessions.map((s) => s.id),
      ...runs.map((r) => r.id),
      ...runs.flatMap((r) => (r.job_id ? [r.job_id] : [])),
    ]);
    expect(sessions.map((s) => s.id)).toContain(id);
    // The API's and this sweeper's metrics too.
    const apiText = await (await fetch(`${apiUrl}/metrics`)).text();
    const sweeperText = await metrics.registry.metrics();
    expect(apiText).toContain("fleet_resume_refusals_total");
    // Parked nothing: every parked series is there (initialised at 0) and still 0.
    const parked = parseSamples(sweeperText).filter((s) => s.name === "fleet_sessions_parked_total");
    expect(parked.length).toBeGreaterThan(0);
    expect(parked.every((s) => s.value === 0)).toBe(true);
    const labelValues = [text, apiText, sweeperText].flatMap((t) =>
      parseSamples(t).flatMap((s) => Object.values(s.labels)),
    );
    expect(labelValues.length).toBeGreaterThan(0);
    expect(labelValues.filter((v) => ids.has(v))).toEqual([]);
    for (const t of [text, apiText, sweeperText]) {
      for (const session of sessions) expect(t).not.toContain(session.id);
      for (const run of runs) expect(t).not.toContain(run.id);
    }
  });
});
