/**
 * Session events and extensions (contracts §7, §8) with real worker processes: an SSE reader
 * follows a session whose worker is SIGKILLed mid-tool and reconnects at random points (its
 * MESSAGE events are exactly the stored messages), the transcript and goal mode across that
 * crash (with the hooks of the killed run and of its resume), a cut stream and its resumes, and
 * the hook rules through an extension module.
 */
import { readFile, rm } from "node:fs/promises";
import { join } from "node:path";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import type { FleetClient, FleetEvent } from "../src/producer/client.js";
import { loadConfig } from "../src/shared/config.js";
import { compareIds } from "../src/shared/event-expiry.js";
import { RunQueues } from "../src/shared/queues.js";
import { type RunningSweeper, startSweeper } from "../src/sweeper/sweeper-process.js";
import {
  createFleetEnv,
  type FleetEnv,
  ROOT,
  readyInfo,
  type WorkerProcess,
  waitFor,
} from "./support/fleet-env.js";
import { INTERRUPTED_TEXT } from "./support/sleepy-sessions.js";
import { readSse } from "./support/sse.js";

const EXTENSION = join(ROOT, "test/fixtures/recording-extension.ts");

describe("session events and extensions", () => {
  let fleet: FleetEnv;
  let client: FleetClient;
  let base: string;
  let transcripts: string;
  let hookLog: string;

  beforeAll(async () => {
    fleet = await createFleetEnv("events");
    const { api, client: c } = await fleet.startApi();
    client = c;
    base = api.url;
    transcripts = join(fleet.config.toolDir, "transcripts");
    hookLog = join(fleet.config.toolDir, "hooks.jsonl");
  }, 60_000);
  afterAll(async () => {
    await fleet?.close();
  });

  const eventsUrl = (id: string) => `${base}/v1/sessions/${id}/events`;

  it("a reader that reconnects at random points across a SIGKILL mid-tool gets every stored message once, in seq order", async () => {
    const sweeper: RunningSweeper = await startSweeper(
      { ...loadConfig(fleet.env), logLevel: "silent" },
      { serveMetrics: false },
    );
    const workerEnv = { FLEET_TRANSCRIPT_DIR: transcripts, HOOK_LOG: hookLog };
    // The recording extension too: a run re-tried after the crash runs beforeRun again.
    const extensionArgs = ["--extensions", EXTENSION];
    try {
      const victim = await fleet.spawnWorker(workerEnv, extensionArgs);
      const { id } = await client.createSession({
        agent: {
          model: {
            provider: "scripted",
            steps: [
              {
                text: "writing the log, then a nap",
                toolCalls: [
                  { id: "log", name: "append_file", arguments: { path: "events-log.txt", line: "ran" } },
                  { id: "nap", name: "sleep", arguments: { ms: 4_000 } },
                ],
              },
              { text: "done" },
            ],
          },
          tools: ["append_file", "sleep"],
        },
      });
      // Goal mode in the same crash: round 1 happens, then the nap is cut; the resume adds none.
      const goal = await client.createSession({
        agent: {
          model: {
            provider: "scripted",
            steps: [
              { text: "first try" },
              { toolCalls: [{ id: "nap", name: "sleep", arguments: { ms: 4_000 } }] },
              { text: "second try" },
            ],
          },
          tools: ["sleep"],
        },
      });
      const { runId } = await client.send(id, "log and nap");
      await client.send(goal.id, "reach the goal", { goal: { text: "say it twice", maxRounds: 3 } });

      const all: FleetEvent[] = [];
      // The first connection, without an id: from the run's RUN_STARTED until the nap starts.
      // The first connection, without an id, starts at the run's RUN_STARTED; then reconnects
      // with the last id, each cut after 1 or 2 events, until the nap has started.
      const first = await readSse(eventsUrl(id), { stop: (_e, got) => got.length >= 2 });
      expect(first.status).toBe(200);
      expect(first.contentType).toMatch(/^text\/event-stream/);
      expect(first.events[0]).toMatchObject({
        type: "RUN_STARTED",
        data: { runId, kind: "run", trigger: "api" },
      });
      all.push(...first.events);
      const napping = (e: FleetEvent) => e.type === "TOOL_STARTED" && e.data.toolCallId === "nap";
      let reconnects = 0;
      while (!all.some(napping)) {
        const cut = 1 + Math.floor(Math.random() * 2);
        const part = await readSse(eventsUrl(id), {
          after: all.at(-1)!.id,
          stop: (e, got) => napping(e) || got.length >= cut,
        });
        all.push(...part.events);
        reconnects++;
      }
      await waitFor(
        async () => {
          const [row] = await fleet.database.sql<{ n: number }[]>`
            select count(*)::int as n from messages where session_id = ${goal.id} and role = 'assistant'`;
          return row!.n === 2;
        },
        20_000,
        "the goal session inside its nap",
      );
      victim.child.kill("SIGKILL");
      await victim.exited;
      const survivor = await fleet.spawnWorker(workerEnv, extensionArgs);
      stopAfter.push(survivor);

      // Reconnect with the last id, cutting each connection after 1 to 3 events, until the
      // resume's RUN_COMPLETED.
      const done = (e: FleetEvent) => e.type === "RUN_COMPLETED" && e.data.outcome === "completed";
      while (!all.some(done)) {
        const cut = 1 + Math.floor(Math.random() * 2);
        const part = await readSse(eventsUrl(id), {
          after: all.at(-1)!.id,
          stop: (e, got) => done(e) || got.length >= cut,
        });
        expect(part.status).toBe(200);
        all.push(...part.events);
        reconnects++;
      }
      expect(reconnects).toBeGreaterThanOrEqual(4);

      // Ids strictly increasing, nothing twice.
      for (let i = 1; i < all.length; i++) expect(compareIds(all[i - 1]!.id, all[i]!.id)).toBe(-1);
      const session = await client.getSession(id);
      const [crashed, resume] = session.runs;
      expect(crashed).toMatchObject({ id: runId, endedReason: "crashed" });
      expect(resume).toMatchObject({ kind: "resume", resumeKind: "recover_tools", trigger: "sweeper" });
      // MESSAGE events are exactly the stored messages, by seq: no gap, no duplicate.
      const messages = all.filter((e) => e.type === "MESSAGE").map((e) => e.data.message);
      expect(messages).toEqual(session.messages);
      // The order of what happened around the crash.
      const at = (pred: (e: FleetEvent) => boolean) => all.findIndex(pred);
      const crashEnd = at((e) => e.type === "RUN_COMPLETED" && e.data.runId === runId);
      const resumeStart = at((e) => e.type === "RUN_STARTED" && e.data.runId === resume!.id);
      const interrupted = at(
        (e) =>
          e.type === "MESSAGE" &&
          e.data.message.toolCallId === "nap" &&
          e.data.message.content === INTERRUPTED_TEXT,
      );
      const lastEnd = at((e) => e.type === "RUN_COMPLETED" && e.data.runId === resume!.id);
      expect(all[crashEnd]!.data.outcome).toBe("crashed");
      expect(all[resumeStart]!.data).toMatchObject({
        kind: "resume",
        resumeKind: "recover_tools",
        trigger: "sweeper",
      });
      expect(crashEnd).toBeGreaterThan(0);
      expect(resumeStart).toBeGreaterThan(crashEnd);
      expect(interrupted).toBeGreaterThan(resumeStart);
      expect(lastEnd).toBeGreaterThan(interrupted);
      expect(all[lastEnd]!.data.outcome).toBe("completed");
      expect(all.filter((e) => e.type === "RUN_COMPLETED")).toHaveLength(2);

      // Transcript: each committed message once per run, and the resume's turn recorded again
      // from the last user message, so the last record of the turn is whole.
      const lines = (await readFile(join(transcripts, `${id}.jsonl`), "utf8"))
        .trim()
        .split("\n")
        .map((line) => JSON.parse(line));
      const fromResume = lines.filter((l) => l.runId === resume!.id);
      expect(fromResume.map((l) => l.seq)).toEqual(session.messages.map((m) => m.seq));
      expect(fromResume.map((l) => l.message)).toEqual(session.messages);
      expect(lines.filter((l) => l.runId === runId).map((l) => l.seq)).toEqual([1, 2, 3]);

      // Hooks at least once per run attempt (contracts §8): the killed run's beforeRun and
      // onMessage, then the resume's beforeRun (no onMessage, no input) and its afterRun. No
      // afterRun for the killed run: its worker died, the sweeper ended it.
      const hookLines = async () =>
        (await readFile(hookLog, "utf8"))
          .trim()
          .split("\n")
          .map((line) => JSON.parse(line))
          .filter((c) => c.sessionId === id)
          .map(({ sessionId: _, ...rest }) => rest);
      await waitFor(async () => (await hookLines()).some((c) => c.hook === "afterRun"), 5_000, "afterRun");
      expect(await hookLines()).toEqual([
        {
          hook: "beforeRun",
          runId,
          kind: "run",
          resumeKind: null,
          inputMessage: "log and nap",
          trigger: "api",
        },
        { hook: "onMessage", runId, input: "log and nap" },
        {
          hook: "beforeRun",
          runId: resume!.id,
          kind: "resume",
          resumeKind: "recover_tools",
          inputMessage: null,
          trigger: "sweeper",
        },
        { hook: "afterRun", runId: resume!.id, outcome: "completed", error: null },
      ]);

      // Goal mode was not switched on again by the resume: one round, before the crash.
      await waitFor(
        async () => (await client.getSession(goal.id)).status === "completed",
        20_000,
        "goal session",
      );
      const goalSession = await client.getSession(goal.id);
      expect(goalSession.messages.filter((m) => m.role === "internal")).toHaveLength(1);
      expect(goalSession.messages.filter((m) => m.role === "internal")[0]!.content).toContain("say it twice");
      expect(goalSession.messages.at(-1)).toMatchObject({ role: "assistant", content: "second try" });
      expect(goalSession.runs.map((r) => r.endedReason)).toEqual(["crashed", "completed"]);
    } finally {
      await sweeper.stop();
    }
  }, 60_000);

  /** Workers of a test that the next tests must not share jobs with. */
  const stopAfter: WorkerProcess[] = [];

  it("goal mode: rounds are bounded by maxRounds, and GOAL_MET ends them", async () => {
    const bounded = await client.createSession({
      agent: { model: { provider: "scripted", steps: [{ text: "not yet" }] } },
    });
    const met = await client.createSession({
      agent: {
        model: { provider: "scripted", steps: [{ text: "not yet" }, { text: "GOAL_MET: it is done" }] },
      },
    });
    const a = await client.send(bounded.id, "go", { goal: { text: "finish", maxRounds: 2 } });
    const b = await client.send(met.id, "go", { goal: { text: "finish", maxRounds: 5 } });
    expect((await client.waitForRun(a.runId, { timeoutMs: 20_000 })).endedReason).toBe("completed");
    expect((await client.waitForRun(b.runId, { timeoutMs: 20_000 })).endedReason).toBe("completed");
    const roles = async (sid: string) => (await client.getSession(sid)).messages.map((m) => m.role);
    expect(await roles(bounded.id)).toEqual([
      "user",
      "assistant",
      "internal",
      "assistant",
      "internal",
      "assistant",
    ]);
    expect(await roles(met.id)).toEqual(["user", "assistant", "internal", "assistant"]);
    // A goal is checked like any input.
    await expect(client.send(met.id, "go", { goal: { text: "x", maxRounds: 0 } })).rejects.toMatchObject({
      status: 400,
      field: "goal.maxRounds",
    });
  }, 30_000);

  it("a cut stream is MODEL_STOPPED interrupted, and each resume emits the same kinds of events as the run", async () => {
    const cut = { text: "a long answer that breaks in the middle", fault: "stream_cut" as const };
    const { id } = await client.createSession({
      agent: { model: { provider: "scripted", steps: [cut, cut, { text: "whole at last" }] } },
    });
    const collect = async (events: AsyncIterable<FleetEvent>) => {
      const got: FleetEvent[] = [];
      for await (const event of events) got.push(event);
      return got;
    };
    const run = await collect(client.stream(id, "answer"));
    const resumed = await collect(client.streamResume(id));
    const again = await collect(client.streamResume(id));
    const kinds = (events: FleetEvent[]) =>
      [...new Set(events.map((e) => e.type))].filter((t) => t !== "MESSAGE_DELTA").sort();
    expect(run.at(-1)).toMatchObject({ type: "RUN_COMPLETED", data: { outcome: "interrupted" } });
    expect(run.find((e) => e.type === "MODEL_STOPPED")?.data.stopReason).toBe("interrupted");
    expect(resumed[0]).toMatchObject({
      type: "RUN_STARTED",
      data: { kind: "resume", resumeKind: "retry_response" },
    });
    expect(kinds(resumed)).toEqual(kinds(run));
    expect(resumed.at(-1)).toMatchObject({ type: "RUN_COMPLETED", data: { outcome: "interrupted" } });
    expect(again.at(-1)).toMatchObject({ type: "RUN_COMPLETED", data: { outcome: "completed" } });
    expect(again.some((e) => e.type === "MODEL_STOPPED")).toBe(false);
    const session = await client.getSession(id);
    const streamed = [...run, ...resumed, ...again]
      .filter((e) => e.type === "MESSAGE")
      .map((e) => e.data.message);
    expect(streamed).toEqual(session.messages);
  }, 30_000);

  it("hooks: send, resume, nothing_to_resume and a throwing beforeRun, through an extension module", async () => {
    for (const worker of stopAfter.splice(0)) {
      worker.child.kill("SIGTERM");
      await worker.exited;
    }
    await rm(hookLog, { force: true });
    const worker = await fleet.spawnWorker({ HOOK_LOG: hookLog }, ["--extensions", EXTENSION]);
    const agent = { model: { provider: "scripted" as const, steps: [{ text: "ok" }] } };
    const calls = async (sessionId: string) =>
      (await readFile(hookLog, "utf8").catch(() => ""))
        .trim()
        .split("\n")
        .filter(Boolean)
        .map((line) => JSON.parse(line))
        .filter((c) => c.sessionId === sessionId)
        .map(({ sessionId: _, runId: __, ...rest }) => rest);

    // A run with new input: beforeRun (with the input), onMessage, afterRun; the clumsy
    // extension's afterRun throws and changes nothing.
    const sent = await client.createSession({ agent });
    const { runId } = await client.send(sent.id, "hello");
    expect((await client.waitForRun(runId, { timeoutMs: 20_000 })).endedReason).toBe("completed");
    await waitFor(async () => (await calls(sent.id)).length >= 3, 5_000, "hooks of the run");
    expect(await calls(sent.id)).toEqual([
      { hook: "beforeRun", kind: "run", resumeKind: null, inputMessage: "hello", trigger: "api" },
      { hook: "onMessage", input: "hello" },
      { hook: "afterRun", outcome: "completed", error: null },
    ]);
    expect((await client.getSession(sent.id)).messages.map((m) => m.role)).toEqual(["user", "assistant"]);

    // A resume: no onMessage, inputMessage null.
    const crash = JSON.parse(await readFile(join(ROOT, "test/fixtures/crash-history.json"), "utf8"));
    const imported = await client.createSession({
      agent: { ...agent, tools: ["write_file"] },
      messages: crash,
    });
    const resume = await client.resume(imported.id);
    expect((await client.waitForRun(resume.runId, { timeoutMs: 20_000 })).endedReason).toBe("completed");
    await waitFor(async () => (await calls(imported.id)).length >= 2, 5_000, "hooks of the resume");
    expect(await calls(imported.id)).toEqual([
      { hook: "beforeRun", kind: "resume", resumeKind: "recover_tools", inputMessage: null, trigger: "api" },
      { hook: "afterRun", outcome: "completed", error: null },
    ]);

    // A resume that reaches a worker with nothing to resume: beforeRun (its pair, afterRun,
    // follows), then onError with the reason.
    const finished = await client.createSession({
      agent,
      messages: [
        { role: "user", content: "hi" },
        { role: "assistant", content: "hello", stopReason: "end_turn" },
      ],
    });
    const [run] = await fleet.database.sql<{ id: string }[]>`
      insert into runs (id, session_id, tenant, kind, trigger, resume_kind)
      values (gen_random_uuid()::text, ${finished.id}, 'default', 'resume', 'api', 'call_model') returning id`;
    const queues = new RunQueues(fleet.redis, fleet.config.prefix);
    await queues.enqueue("resume", { sessionId: finished.id, runId: run!.id });
    expect((await client.waitForRun(run!.id, { timeoutMs: 20_000 })).endedReason).toBe("nothing_to_resume");
    await waitFor(async () => (await calls(finished.id)).length >= 3, 5_000, "hooks of the refused resume");
    expect(await calls(finished.id)).toEqual([
      { hook: "beforeRun", kind: "resume", resumeKind: null, inputMessage: null, trigger: "api" },
      { hook: "afterRun", outcome: "nothing_to_resume", error: "completed" },
      { hook: "onError", message: "completed", reason: "completed", outcome: "nothing_to_resume" },
    ]);
    await queues.close();

    // A beforeRun that throws: the run ends failed with its message, and the model is not called.
    const refused = await client.createSession({
      agent,
      metadata: { throwBefore: true, throwCommitted: true },
    });
    const r = await client.send(refused.id, "please");
    const ended = await client.waitForRun(r.runId, { timeoutMs: 20_000 });
    expect(ended.endedReason).toBe("failed");
    expect(ended.error).toContain("refused by the recorder");
    expect((await client.getSession(refused.id)).messages.map((m) => m.role)).toEqual(["user"]);
    await waitFor(async () => (await calls(refused.id)).some((c) => c.hook === "onError"), 5_000, "onError");
    expect((await calls(refused.id)).map((c) => c.hook)).toEqual(["beforeRun", "afterRun", "onError"]);
    // Hook errors are counted: the clumsy afterRun threw in each of the four runs, beforeRun once,
    const metrics = await (await fetch(`http://127.0.0.1:${readyInfo(worker).metricsPort}/metrics`)).text();
    const failures = (hook: string) =>
      Number(
        new RegExp(`^fleet_hook_failures_total\\{[^}]*hook="${hook}"[^}]*\\} (\\d+)`, "m").exec(metrics)?.[1],
      );
    expect(failures("afterRun")).toBe(4);
    expect(failures("beforeRun")).toBe(1);
    expect(failures("onError")).toBe(0);
    // onCommitted threw for the one message the refused run committed (its user message).
    expect(failures("onCommitted")).toBe(1);
    expect(metrics).toMatch(/^fleet_events_written_total\{[^}]*type="RUN_COMPLETED"[^}]*\} [1-9]/m);

    // A run that ends provider_error (every try of its model call fails): afterRun, then
    // onError with the run's error and no resume-point reason. Nothing noticed before if
    // onError stopped running for provider_error: the cases above end failed and nothing_to_resume.
    const failing = await client.createSession({
      agent: { model: { provider: "scripted" as const, steps: [{ text: "never", fault: "connection" }] } },
    });
    const f = await client.send(failing.id, "try");
    expect((await client.waitForRun(f.runId, { timeoutMs: 30_000 })).endedReason).toBe("provider_error");
    const ofRun = async () =>
      (await readFile(hookLog, "utf8"))
        .trim()
        .split("\n")
        .map((line) => JSON.parse(line))
        .filter((c) => c.runId === f.runId)
        .map(({ sessionId: _, runId: __, ...rest }) => rest);
    await waitFor(
      async () => (await ofRun()).some((c) => c.hook === "onError"),
      5_000,
      "onError of provider_error",
    );
    const hooks = await ofRun();
    expect(hooks.map((c) => c.hook)).toEqual(["beforeRun", "onMessage", "afterRun", "onError"]);
    expect(hooks[2]).toMatchObject({ outcome: "provider_error", error: expect.stringMatching(/\S/) });
    expect(hooks[3]).toEqual({
      hook: "onError",
      message: hooks[2].error,
      reason: null,
      outcome: "provider_error",
    });
  }, 90_000);
});
