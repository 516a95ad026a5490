/**
 * Interrupted states made on purpose with real `fleet worker` processes (SIGKILL, SIGSTOP), a
 * sweeper and the API, checked against resume-semantics §2–§3 word for word: what is appended
 * (roles, order, the exact texts, contiguous seqs, call ids), that no tool ran twice (the files
 * the tools write), which resume kind is counted, and what `GET …/resume-point` said before.
 * The states: three calls with the second killed mid-way and a message queued behind; a kill and
 * a freeze between a step's append and what follows it (its first tool, or the run's end), held
 * there by an extension's `onCommitted` (test/fixtures/holding-extension.ts); a freeze mid-tool
 * with a message queued behind; pauses, a stream cut and an output limit in one request;
 * resumes racing from two `fleet api` processes with and without another model; a parked
 * session's explicit resume.
 */
import { existsSync } from "node:fs";
import { readFile, writeFile } from "node:fs/promises";
import { join } from "node:path";
import { afterAll, afterEach, beforeAll, describe, expect, it } from "vitest";
import { type FleetApiError, FleetClient } from "../src/producer/client.js";
import { loadConfig } from "../src/shared/config.js";
import { CONTINUE_RESPONSE_TEXT, RETRY_RESPONSE_TEXT } from "../src/shared/resume-plan.js";
import { type RunningSweeper, startSweeper } from "../src/sweeper/sweeper-process.js";
import { killApi, spawnApi } from "./support/api-process.js";
import {
  createFleetEnv,
  type FleetEnv,
  readyInfo,
  type WorkerProcess,
  waitFor,
} from "./support/fleet-env.js";
import { CRASH_HISTORY } from "./support/histories.js";
import { sampleValue } from "./support/metric-samples.js";
import { INTERRUPTED_TEXT } from "./support/sleepy-sessions.js";

describe("interrupted states made with real workers", () => {
  let fleet: FleetEnv;
  let client: FleetClient;
  let sweeper: RunningSweeper;

  beforeAll(async () => {
    fleet = await createFleetEnv("interruptedstates");
    ({ client } = await fleet.startApi());
    sweeper = await startSweeper({ ...loadConfig(fleet.env), logLevel: "silent" }, { serveMetrics: false });
  });
  afterAll(async () => {
    await sweeper?.stop();
    await fleet?.close();
  });

  /** The workers a case started: stopped after it however it ended, so none takes the next case's jobs. */
  const spawned: WorkerProcess[] = [];
  const spawnWorker = async (...args: Parameters<FleetEnv["spawnWorker"]>) => {
    const worker = await fleet.spawnWorker(...args);
    spawned.push(worker);
    return worker;
  };
  afterEach(async () => {
    for (const worker of spawned.splice(0)) {
      if (worker.child.exitCode !== null || worker.child.signalCode !== null) continue;
      worker.child.kill("SIGCONT");
      worker.child.kill("SIGTERM");
      await worker.exited;
    }
  });

  const toolCount = async (name: string) =>
    (
      await fleet.database.sql<{ n: number }[]>`
        select count(*)::int as n from messages where role = 'tool' and tool_call_id = ${name}`
    )[0]!.n;

  it("three calls, the second killed mid-way, a message queued behind: both open calls closed in order, c never runs", async () => {
    const victim = await spawnWorker();
    const { id } = await client.createSession({
      agent: {
        model: {
          provider: "scripted",
          steps: [
            {
              toolCalls: [
                { id: "a", name: "append_file", arguments: { path: "three-a.txt", line: "ran" } },
                { id: "nap", name: "sleep", arguments: { ms: 60_000 } },
                { id: "c", name: "append_file", arguments: { path: "three-c.txt", line: "ran" } },
              ],
            },
            { text: "first done" },
            { text: "second done" },
          ],
        },
        tools: ["append_file", "sleep"],
      },
    });
    await client.send(id, "do three things");
    await waitFor(async () => (await toolCount("a")) === 1, 20_000, "inside the sleep");
    await client.send(id, "and then this");
    expect(await client.resumePoint(id)).toEqual({ resumable: false, reason: "running" });
    victim.child.kill("SIGKILL");
    await victim.exited;
    const rescuer = await spawnWorker();
    await waitFor(
      async () => (await client.getSession(id)).status === "completed",
      30_000,
      "the session completed",
    ).catch(async (e) => {
      console.log(JSON.stringify(await client.getSession(id), null, 1));
      throw e;
    });
    const done = await client.getSession(id);
    expect(done.messages.map((m) => m.seq)).toEqual(done.messages.map((_, i) => i + 1));
    expect(done.messages.map(({ seq, createdAt, ...m }) => m)).toEqual([
      { role: "user", content: "do three things" },
      expect.objectContaining({ role: "assistant", stopReason: "tool_use" }),
      { role: "tool", toolCallId: "a", name: "append_file", content: expect.any(String), success: true },
      { role: "tool", toolCallId: "nap", name: "sleep", content: INTERRUPTED_TEXT, success: false },
      { role: "tool", toolCallId: "c", name: "append_file", content: INTERRUPTED_TEXT, success: false },
      { role: "user", content: "and then this" },
      expect.objectContaining({ role: "assistant", content: "first done", stopReason: "end_turn" }),
    ]);
    expect(await readFile(join(fleet.config.toolDir, "three-a.txt"), "utf8")).toBe("ran\n");
    expect(existsSync(join(fleet.config.toolDir, "three-c.txt"))).toBe(false);
    const metrics = await (await fetch(`http://127.0.0.1:${readyInfo(rescuer).metricsPort}/metrics`)).text();
    // The queued message's run closed both calls (no resume: the new input goes first, §3).
    expect(sampleValue(metrics, "fleet_tool_calls_total", { tool: "sleep", outcome: "interrupted" })).toBe(1);
    expect(
      sampleValue(metrics, "fleet_tool_calls_total", { tool: "append_file", outcome: "interrupted" }),
    ).toBe(1);
    expect(done.runs.map((r) => [r.kind, r.endedReason])).toEqual([
      ["run", "crashed"],
      ["run", "completed"],
    ]);
    rescuer.child.kill("SIGTERM");
    await rescuer.exited;
  }, 90_000);

  const HOLDING = join(import.meta.dirname, "fixtures/holding-extension.ts");
  const held = (id: string) =>
    waitFor(() => existsSync(join(fleet.config.toolDir, `held-${id}`)), 20_000, "the run held by the hook");
  /**
   * A session whose first step (text `holdAt`) asks for two append_file calls (`PATH-1.txt`,
   * `PATH-2.txt`), sent a message, and held by the hook right after that step's append.
   */
  const twoWritesHeld = async (holdAt: string, [a, b]: [string, string], path: string) => {
    const { id } = await client.createSession({
      agent: {
        model: {
          provider: "scripted",
          steps: [
            {
              text: holdAt,
              toolCalls: [
                { id: a, name: "append_file", arguments: { path: `${path}-1.txt`, line: "ran" } },
                { id: b, name: "append_file", arguments: { path: `${path}-2.txt`, line: "ran" } },
              ],
            },
            { text: "checked" },
          ],
        },
        tools: ["append_file"],
      },
      metadata: { holdAt },
    });
    await client.send(id, "write two");
    await held(id);
    return id;
  };

  it("killed between its last append and its end: the run ends crashed, nothing is resumed, the session stays completed", async () => {
    const victim = await spawnWorker({}, ["--extensions", HOLDING]);
    const { id } = await client.createSession({
      agent: { model: { provider: "scripted", steps: [{ text: "all done" }] } },
      metadata: { holdAt: "all done" },
    });
    await client.send(id, "finish");
    await held(id);
    expect(await client.resumePoint(id)).toEqual({ resumable: false, reason: "running" });
    victim.child.kill("SIGKILL");
    await victim.exited;
    const rescuer = await spawnWorker();
    await waitFor(
      async () => (await client.getSession(id)).runs.every((r) => r.status === "ended"),
      20_000,
      "the run ended",
    );
    await new Promise((r) => setTimeout(r, 2_000));
    const done = await client.getSession(id);
    expect(done.messages.map(({ role, content }) => [role, content])).toEqual([
      ["user", "finish"],
      ["assistant", "all done"],
    ]);
    expect(done.status).toBe("completed");
    expect(done.runs.map((r) => [r.kind, r.endedReason])).toEqual([["run", "crashed"]]);
    expect(await client.resumePoint(id)).toEqual({ resumable: false, reason: "completed" });
    rescuer.child.kill("SIGTERM");
    await rescuer.exited;
  }, 60_000);

  it("killed between a tool step's append and its first tool: every call answered as interrupted, none run", async () => {
    const victim = await spawnWorker({}, ["--extensions", HOLDING]);
    const id = await twoWritesHeld("writing", ["w1", "w2"], "held");
    victim.child.kill("SIGKILL");
    await victim.exited;
    const rescuer = await spawnWorker();
    await waitFor(async () => (await client.getSession(id)).status === "completed", 30_000, "completed");
    const done = await client.getSession(id);
    expect(done.messages.map((m) => m.seq)).toEqual([1, 2, 3, 4, 5]);
    expect(done.messages.slice(2, 4).map(({ seq, createdAt, ...m }) => m)).toEqual([
      { role: "tool", toolCallId: "w1", name: "append_file", content: INTERRUPTED_TEXT, success: false },
      { role: "tool", toolCallId: "w2", name: "append_file", content: INTERRUPTED_TEXT, success: false },
    ]);
    expect(existsSync(join(fleet.config.toolDir, "held-1.txt"))).toBe(false);
    expect(existsSync(join(fleet.config.toolDir, "held-2.txt"))).toBe(false);
    expect(done.runs.map((r) => [r.kind, r.resumeKind, r.endedReason])).toEqual([
      ["run", null, "crashed"],
      ["resume", "recover_tools", "completed"],
    ]);
    // Counted once: the resume under its kind, both calls as interrupted, and its crash-to-resume time.
    const metrics = await (await fetch(`http://127.0.0.1:${readyInfo(rescuer).metricsPort}/metrics`)).text();
    const resumed = ["sweeper", "worker"].map(
      (trigger) => sampleValue(metrics, "fleet_resumes_total", { kind: "recover_tools", trigger }) ?? 0,
    );
    expect(resumed[0]! + resumed[1]!).toBe(1);
    expect(
      sampleValue(metrics, "fleet_tool_calls_total", { tool: "append_file", outcome: "interrupted" }),
    ).toBe(2);
    expect(sampleValue(metrics, "fleet_tool_calls_total", { tool: "append_file", outcome: "ok" })).toBe(0);
    expect(sampleValue(metrics, "fleet_crash_to_resume_seconds_count", {})).toBe(1);
    expect(sampleValue(metrics, "fleet_crash_to_resume_seconds_sum", {})).toBeLessThan(10);
    rescuer.child.kill("SIGTERM");
    await rescuer.exited;
  }, 60_000);

  it("frozen between a tool step's append and its first tool: moved after the lease, and on waking it runs no tool", async () => {
    const frozen = await spawnWorker({}, ["--extensions", HOLDING]);
    const id = await twoWritesHeld("freezing", ["f1", "f2"], "frozen");
    frozen.child.kill("SIGSTOP");
    const rescuer = await spawnWorker();
    try {
      await waitFor(async () => (await client.getSession(id)).status === "completed", 30_000, "completed");
    } finally {
      await writeFile(join(fleet.config.toolDir, `release-${id}`), "");
      frozen.child.kill("SIGCONT");
    }
    await new Promise((r) => setTimeout(r, 4_000));
    const done = await client.getSession(id);
    expect(done.messages.map((m) => m.seq)).toEqual([1, 2, 3, 4, 5]);
    expect(done.messages.slice(2, 4).map((m) => m.content)).toEqual([INTERRUPTED_TEXT, INTERRUPTED_TEXT]);
    expect(existsSync(join(fleet.config.toolDir, "frozen-1.txt"))).toBe(false);
    expect(existsSync(join(fleet.config.toolDir, "frozen-2.txt"))).toBe(false);
    expect(done.runs.map((r) => [r.kind, r.resumeKind, r.endedReason])).toEqual([
      ["run", null, "stalled"],
      ["resume", "recover_tools", "completed"],
    ]);
    for (const w of [frozen, rescuer]) {
      w.child.kill("SIGTERM");
      await w.exited;
    }
  }, 60_000);

  it("frozen between its last append and its end: ended stalled, not resumed, and its late end changes nothing", async () => {
    const frozen = await spawnWorker({}, ["--extensions", HOLDING]);
    const { metricsPort } = readyInfo(frozen);
    const { id } = await client.createSession({
      agent: { model: { provider: "scripted", steps: [{ text: "frozen done" }] } },
      metadata: { holdAt: "frozen done" },
    });
    await client.send(id, "finish");
    await held(id);
    frozen.child.kill("SIGSTOP");
    try {
      await waitFor(
        async () => (await client.getSession(id)).runs.every((r) => r.status === "ended"),
        20_000,
        "the run ended by the sweeper",
      );
    } finally {
      await writeFile(join(fleet.config.toolDir, `release-${id}`), "");
      frozen.child.kill("SIGCONT");
    }
    await new Promise((r) => setTimeout(r, 4_000));
    const done = await client.getSession(id);
    const metrics = await (await fetch(`http://127.0.0.1:${metricsPort}/metrics`)).text();
    // Woken, it tried to end the run with its last step's commit behind it: refused, counted as
    // a fenced write, and not counted as a completed run.
    expect(sampleValue(metrics, "fleet_fenced_writes_total", {})).toBeGreaterThanOrEqual(1);
    expect(sampleValue(metrics, "fleet_runs_total", { kind: "run", outcome: "completed" })).toBe(0);
    expect(done.status).toBe("completed");
    expect(done.messages.map((m) => m.seq)).toEqual([1, 2]);
    expect(done.runs.map((r) => [r.kind, r.endedReason])).toEqual([["run", "stalled"]]);
    frozen.child.kill("SIGTERM");
    await frozen.exited;
  }, 60_000);

  it("resumes racing from two API processes, with and without another model: one resume, b answered once", async () => {
    const apis = await Promise.all([spawnApi(fleet), spawnApi(fleet)]);
    try {
      const clients = apis.map((a) => new FleetClient({ baseUrl: a.url }));
      const other = { provider: "scripted" as const, steps: [{ text: "other model" }] };
      const { id } = await client.createSession({
        agent: { model: { provider: "scripted", steps: [{ text: "primary" }] }, tools: ["write_file"] },
        messages: CRASH_HISTORY,
      });
      const answers = await Promise.all(
        Array.from({ length: 12 }, (_, i) =>
          clients[i % 2]!.resume(id, i % 3 === 0 ? { model: other } : {}).then(
            (ok) => ({ ok, model: i % 3 === 0 }),
            (error: FleetApiError) => ({ error: [error.status, error.reason], model: i % 3 === 0 }),
          ),
        ),
      );
      const runIds = new Set(answers.flatMap((a) => ("ok" in a ? [a.ok.runId] : [])));
      expect(runIds.size).toBe(1);
      for (const a of answers) if ("error" in a) expect(a.error).toEqual([409, "running"]);
      const worker = await spawnWorker();
      await waitFor(async () => (await client.getSession(id)).status === "completed", 20_000, "completed");
      const done = await client.getSession(id);
      expect(done.messages.map((m) => m.seq)).toEqual([1, 2, 3, 4, 5]);
      expect(done.messages.filter((m) => m.role === "tool").map((m) => m.content)).toEqual([
        "wrote a.txt",
        INTERRUPTED_TEXT,
      ]);
      expect(done.runs).toHaveLength(1);
      expect(done.runs[0]).toMatchObject({ kind: "resume", trigger: "api", resumeKind: "recover_tools" });
      const winner = answers.find((a) => "ok" in a)!;
      expect(done.messages.at(-1)!.content).toBe(winner.model ? "other model" : "primary");
      expect(answers.filter((a) => "ok" in a).every((a) => a.model === winner.model)).toBe(true);
      const metrics = await (await fetch(`http://127.0.0.1:${readyInfo(worker).metricsPort}/metrics`)).text();
      expect(sampleValue(metrics, "fleet_resumes_total", { kind: "recover_tools", trigger: "api" })).toBe(1);
      expect(existsSync(join(fleet.config.toolDir, "b.txt"))).toBe(false);
      worker.child.kill("SIGTERM");
      await worker.exited;
    } finally {
      for (const a of apis) killApi(a);
    }
  }, 90_000);

  it("a parked session: refused stays refused; attempts_exhausted resumes with another model", async () => {
    const worker = await spawnWorker();
    const { id: refusedId } = await client.createSession({
      agent: { model: { provider: "scripted", steps: [{ text: "no", stopReason: "refusal" }] } },
    });
    await client.send(refusedId, "please");
    await waitFor(async () => (await client.getSession(refusedId)).status === "parked", 20_000, "parked");
    expect(await client.resumePoint(refusedId)).toEqual({ resumable: false, reason: "refused" });
    const refusedAnswer = await client.resume(refusedId).catch((e: FleetApiError) => e);
    expect([(refusedAnswer as FleetApiError).status, (refusedAnswer as FleetApiError).reason]).toEqual([
      409,
      "refused",
    ]);
    const { id } = await client.createSession({
      agent: {
        model: { provider: "scripted", steps: [{ text: "x", fault: "connection" }] },
      },
    });
    await client.send(id, "hello");
    await waitFor(async () => (await client.getSession(id)).status === "parked", 60_000, "parked").catch(
      async (e) => {
        console.log(JSON.stringify(await client.getSession(id), null, 1));
        throw e;
      },
    );
    expect((await client.getSession(id)).parkedReason).toMatch(/^attempts_exhausted: /);
    expect(await client.resumePoint(id)).toMatchObject({ resumable: true, kind: "call_model" });
    const resumed = await client.resume(id, {
      model: { provider: "scripted", steps: [{ text: "from the other model" }] },
    });
    expect(resumed.kind).toBe("call_model");
    await waitFor(async () => (await client.getSession(id)).status === "completed", 20_000, "completed");
    const done = await client.getSession(id);
    expect(done.messages.map(({ role, content }) => [role, content])).toEqual([
      ["user", "hello"],
      ["assistant", "from the other model"],
    ]);
    expect(done.runs.at(-1)).toMatchObject({ id: resumed.runId, trigger: "api", endedReason: "completed" });
    worker.child.kill("SIGTERM");
    await worker.exited;
  }, 120_000);

  it("frozen mid-tool with a message queued behind: the message runs elsewhere once, and the woken worker adds nothing", async () => {
    const frozen = await spawnWorker();
    const { workerId } = readyInfo(frozen);
    const { id } = await client.createSession({
      agent: {
        model: {
          provider: "scripted",
          steps: [
            {
              toolCalls: [
                { id: "fa", name: "append_file", arguments: { path: "fz-a.txt", line: "ran" } },
                { id: "fnap", name: "sleep", arguments: { ms: 3_000 } },
                { id: "fc", name: "append_file", arguments: { path: "fz-c.txt", line: "ran" } },
              ],
            },
            { text: "answered" },
          ],
        },
        tools: ["append_file", "sleep"],
      },
    });
    await client.send(id, "first");
    await waitFor(async () => (await toolCount("fa")) === 1, 20_000, "inside the sleep");
    frozen.child.kill("SIGSTOP");
    await client.send(id, "second");
    const rescuer = await spawnWorker();
    try {
      await waitFor(async () => (await client.getSession(id)).status === "completed", 30_000, "completed");
    } finally {
      frozen.child.kill("SIGCONT");
    }
    await new Promise((r) => setTimeout(r, 5_000));
    const done = await client.getSession(id);
    expect(done.messages.map((m) => m.seq)).toEqual([1, 2, 3, 4, 5, 6, 7]);
    expect(done.messages.map((m) => [m.role, m.content.slice(0, 20)])).toEqual([
      ["user", "first"],
      ["assistant", ""],
      ["tool", expect.any(String)],
      ["tool", INTERRUPTED_TEXT.slice(0, 20)],
      ["tool", INTERRUPTED_TEXT.slice(0, 20)],
      ["user", "second"],
      ["assistant", "answered"],
    ]);
    expect(existsSync(join(fleet.config.toolDir, "fz-c.txt"))).toBe(false);
    expect(await readFile(join(fleet.config.toolDir, "fz-a.txt"), "utf8")).toBe("ran\n");
    // Ended by whichever comes first once the lease lapses: the sweeper (`stalled`) or the
    // rescuer's claim of the queued message's job, which ends a stale run `crashed`.
    expect(["stalled", "crashed"]).toContain(done.runs[0]!.endedReason);
    expect(done.runs.map((r) => [r.kind, r.endedReason]).slice(1)).toEqual([["run", "completed"]]);
    const [late] = await fleet.database.sql<{ n: number }[]>`
      select count(*)::int as n from messages m join runs r on r.id = m.run_id
       where r.worker_id = ${workerId} and m.seq > 3`;
    expect(late!.n).toBe(0);
    for (const w of [frozen, rescuer]) {
      w.child.kill("SIGTERM");
      await w.exited;
    }
  }, 90_000);

  it("pauses below the limit, a stream cut, an output limit: retried once, continued once, with the exact texts", async () => {
    const worker = await spawnWorker();
    const { id } = await client.createSession({
      agent: {
        model: {
          provider: "scripted",
          steps: [
            { text: "p1", stopReason: "paused" },
            { text: "p2", stopReason: "paused" },
            { text: "half of it", fault: "stream_cut", faultTimes: 1 },
            { text: "long", stopReason: "max_output" },
            { text: "er answer" },
          ],
        },
        pauseLimit: 2,
      },
    });
    await client.send(id, "go");
    await waitFor(
      async () => (await client.getSession(id)).status === "completed",
      40_000,
      "completed",
    ).catch(async (e) => {
      console.log(JSON.stringify(await client.getSession(id), null, 1));
      throw e;
    });
    const done = await client.getSession(id);
    expect(
      done.messages.map((m) => [m.seq, m.role, m.content, m.role === "assistant" ? m.stopReason : ""]),
    ).toEqual([
      [1, "user", "go", ""],
      [2, "assistant", "p1", "paused"],
      [3, "assistant", "p2", "paused"],
      [4, "assistant", "half o", "interrupted"],
      [5, "internal", RETRY_RESPONSE_TEXT, ""],
      [6, "assistant", "long", "max_output"],
      [7, "internal", CONTINUE_RESPONSE_TEXT, ""],
      [8, "assistant", "er answer", "end_turn"],
    ]);
    expect(done.runs.map((r) => [r.kind, r.resumeKind, r.endedReason])).toEqual([
      ["run", null, "interrupted"],
      ["resume", "retry_response", "max_output"],
      ["resume", "continue_response", "completed"],
    ]);
    const metrics = await (await fetch(`http://127.0.0.1:${readyInfo(worker).metricsPort}/metrics`)).text();
    for (const kind of ["retry_response", "continue_response"]) {
      const counted = ["sweeper", "worker"].map(
        (trigger) => sampleValue(metrics, "fleet_resumes_total", { kind, trigger }) ?? 0,
      );
      expect(counted[0]! + counted[1]!).toBe(1);
    }
    for (const [stop, n] of [
      ["paused", 2],
      ["interrupted", 1],
      ["max_output", 1],
      ["end_turn", 1],
    ] as const)
      expect(sampleValue(metrics, "fleet_model_stops_total", { stop_reason: stop })).toBe(n);
    worker.child.kill("SIGTERM");
    await worker.exited;
  }, 90_000);
});
