/**
 * The chaos report's account of its slowest resumes (bench/chaos-explain.ts): from the runs'
 * rows, the kills, the faults played and the processes' logs, each slow interrupted run is
 * named with its session, the fault, which sweeper noticed it when, and what it did; a run
 * no sweeper logged ending (one killed in between) is said to be so. The logs kept by a
 * spawned process are read back one file per process.
 */
import { mkdtemp, rm, writeFile } from "node:fs/promises";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { describe, expect, it } from "vitest";
import type { ChaosHistory, RunRow } from "../bench/chaos-checks.js";
import {
  explainSlowest,
  type LogLine,
  lockTakeovers,
  parseLogLine,
  readRoleLogs,
  splitWaits,
} from "../bench/chaos-explain.js";
import { spawnUntilReady } from "../bench/support.js";

const T0 = 1_000_000;

function run(fields: Partial<RunRow> & Pick<RunRow, "id" | "sessionId">): RunRow {
  return {
    kind: "run",
    resumeKind: null,
    trigger: "api",
    status: "ended",
    endedReason: "completed",
    workerId: "w1",
    createdAtMs: T0,
    startedAtMs: T0,
    endedAtMs: null,
    ...fields,
  };
}

/** Two sessions on worker w1, killed at +6 s: "fast" resumed in 0.5 s, "slow" in 10.5 s. */
function history(): ChaosHistory {
  return {
    sessions: [
      { id: "s-fast", label: "c1", status: "active", tailState: "completed", parkedReason: null, lastSeq: 4 },
      { id: "s-slow", label: "c2", status: "active", tailState: "completed", parkedReason: null, lastSeq: 4 },
    ],
    messages: [],
    runs: [
      run({ id: "r-fast", sessionId: "s-fast", endedReason: "crashed" }),
      run({ id: "r-slow", sessionId: "s-slow", endedReason: "crashed" }),
      run({
        id: "n-fast",
        sessionId: "s-fast",
        kind: "resume",
        resumeKind: "recover_tools",
        trigger: "sweeper",
        workerId: "w2",
        createdAtMs: T0 + 6_300,
        startedAtMs: T0 + 6_500,
      }),
      run({
        id: "n-slow",
        sessionId: "s-slow",
        kind: "resume",
        resumeKind: "call_model",
        trigger: "sweeper",
        workerId: "w2",
        createdAtMs: T0 + 16_300,
        startedAtMs: T0 + 16_500,
      }),
    ],
    files: [],
    starts: [],
  };
}

const line = (proc: string, atMs: number, msg: string, fields: Record<string, unknown> = {}): LogLine => ({
  proc,
  time: T0 + atMs,
  msg,
  ...fields,
});

describe("the slowest resumes of a chaos run", () => {
  it("name the session, the fault, who noticed when, and what was done", () => {
    const logs = [
      line("worker-1", 0, "worker started", { workerId: "w1" }),
      line("worker-2", 100, "worker started", { workerId: "w2" }),
      line("sweeper-10", 6_200, "run abandoned", { sessionId: "s-fast", runId: "r-fast", cause: "crashed" }),
      line("sweeper-10", 6_300, "resume enqueued", {
        sessionId: "s-fast",
        runId: "n-fast",
        kind: "recover_tools",
        attempt: 1,
        delayMs: 0,
      }),
      // s-slow: sweeper-11 ended its run and was killed before queuing the resume (nothing logged).
      line("sweeper-10", 16_200, "sweep lock of a dead sweeper taken over", {
        sessionId: "s-slow",
        holder: "p:sweeper:11",
      }),
      line("sweeper-10", 16_300, "resume enqueued", {
        sessionId: "s-slow",
        runId: "n-slow",
        kind: "call_model",
        cause: "interrupted",
        attempt: 1,
        delayMs: 0,
      }),
      line("sweeper-10", 16_400, "batch ended", { batchId: "b" }),
    ];
    const faults = [
      { atMs: T0 + 6_000, what: "SIGKILL worker w1, 2 runs on it" },
      { atMs: T0 + 6_100, what: "SIGKILL sweeper sweeper-11" },
      { atMs: T0 + 30_000, what: "terminated 3 Postgres connections" },
    ];
    const out = explainSlowest(history(), [{ workerId: "w1", atMs: T0 + 6_000 }], faults, logs, T0, 1);
    expect(out).toEqual([
      "1. c2 (session s-slow) waited 10.5 s: run r-slow on worker w1, SIGKILLed at 6.0 s",
      "    +10.2 s  sweeper-10: took over the sweep lock of dead p:sweeper:11",
      "    +10.3 s  sweeper-10: resume n-slow queued (call_model, attempt 1, delay 0 ms)",
      "             no sweeper logged ending run r-slow",
      "    +10.5 s  w2: resume call_model n-slow started (its run row created at +10.3 s)",
      "   workers up when it was queued: 1 (w2)",
      "   faults around it: 6.1 s SIGKILL sweeper sweeper-11",
    ]);
    // No worker up when the resume was queued: it waited for a replacement to start.
    const late = logs.map((l) => (l.proc === "worker-2" ? { ...l, time: T0 + 16_400 } : l));
    expect(explainSlowest(history(), [{ workerId: "w1", atMs: T0 + 6_000 }], faults, late, T0, 1)[5]).toBe(
      "   workers up when it was queued: 0; the next one started at +10.4 s",
    );
    // sweeper-11's lock was taken over 10.1 s after its SIGKILL; a holder never killed: unknown.
    const takeover = (holder: string) =>
      line("sweeper-10", 16_200, "sweep lock of a dead sweeper taken over", { holder });
    expect(
      lockTakeovers(faults, [takeover("p:sweeper:11-ab12cd34"), takeover("p:sweeper:99-ab12cd34")]),
    ).toEqual([10_100, null]);
    // The waits split at the resume's queuing: the sweeper's part, then the workers'.
    expect(splitWaits(history(), [{ workerId: "w1", atMs: T0 + 6_000 }], logs)).toEqual([
      ["kill → resume queued", "p50 300 ms, p99 10300 ms, max 10300 ms"],
      ["queued → started", "p50 200 ms, p99 200 ms, max 200 ms"],
    ]);
    // s-fast queued at once but started 20 s later (no worker free): first by its whole wait,
    // second by the sweepers' part, where s-slow (queued 10.3 s after the kill) comes first.
    const late2 = history();
    late2.runs.find((r) => r.id === "n-fast")!.startedAtMs = T0 + 26_000;
    const kills = [{ workerId: "w1", atMs: T0 + 6_000 }];
    expect(explainSlowest(late2, kills, faults, logs, T0, 1)[0]).toMatch(/^1\. c1 .* waited 20\.0 s/);
    expect(explainSlowest(late2, kills, faults, logs, T0, 1, "queued")[0]).toBe(out[0]);
    // Both, slowest first; the fast one was noticed and queued by sweeper-10 within 0.3 s.
    const both = explainSlowest(history(), [{ workerId: "w1", atMs: T0 + 6_000 }], faults, logs, T0);
    const fast = both.slice(both.findIndex((l) => l.startsWith("2. ")));
    expect(fast.slice(0, 3)).toEqual([
      "2. c1 (session s-fast) waited 0.5 s: run r-fast on worker w1, SIGKILLed at 6.0 s",
      "     +0.2 s  sweeper-10: ended run r-fast crashed",
      "     +0.3 s  sweeper-10: resume n-fast queued (recover_tools, attempt 1, delay 0 ms)",
    ]);
  });

  it("read each process's log file, skipping ready lines and lines cut by a kill", async () => {
    expect(parseLogLine("sweeper-1", "fleet sweeper ready: metrics on port 1")).toBeNull();
    expect(parseLogLine("sweeper-1", '{"level":30,"time":5,"msg":"run aband')).toBeNull();
    const dir = await mkdtemp(join(tmpdir(), "chaos-explain-"));
    try {
      // What the harness keeps: a spawned process's stdout and stderr, in <role>-<pid>.log.
      const { child, exited } = await spawnUntilReady(
        [
          "-e",
          `console.log('ready'); console.log(JSON.stringify({ time: 7, msg: "resume enqueued", sessionId: "s" })); console.error('{"time":3,"msg":"sweep failed","err":{"message":"ECONNRESET"}}')`,
        ],
        {},
        /ready/,
        10_000,
        { logFile: (pid) => join(dir, `sweeper-${pid}.log`) },
      );
      await exited;
      await writeFile(join(dir, "notes.txt"), '{"time":1,"msg":"not a log"}\n');
      // The file is written as the output comes: read until both lines are in.
      let logs = await readRoleLogs(dir);
      for (let i = 0; i < 100 && logs.length < 2; i++) {
        await new Promise((resolve) => setTimeout(resolve, 50));
        logs = await readRoleLogs(dir);
      }
      expect(logs.map((l) => [l.proc, l.time, l.msg])).toEqual([
        [`sweeper-${child.pid}`, 3, "sweep failed"],
        [`sweeper-${child.pid}`, 7, "resume enqueued"],
      ]);
    } finally {
      await rm(dir, { recursive: true, force: true });
    }
  });
});
