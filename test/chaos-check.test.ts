/**
 * The checks of `npm run chaos` (bench/chaos-checks.ts) fail when they should: a clean
 * hand-made history passes every check, and each hand-made violation is caught by its
 * check. Then the seeded plan is deterministic and valid, and a tiny real run passes.
 */
import { spawn } from "node:child_process";
import { mkdtemp, readdir, rm } from "node:fs/promises";
import { tmpdir } from "node:os";
import { join, resolve } from "node:path";
import { describe, expect, it } from "vitest";
import {
  type ChaosHistory,
  checkEventStreams,
  checkInterruptedText,
  checkNoAppendAfterEnd,
  checkNoToolAfterRunEnd,
  checkOneResultPerCall,
  checkSeqContiguous,
  checkSessionsSettled,
  checkSideEffectsOnce,
  describeSession,
  INTERRUPTED_TEXT,
  type MessageRow,
  runChecks,
  type StreamEvent,
} from "../bench/chaos-checks.js";
import { planChaos } from "../bench/chaos-plan.js";
import { parseAgentConfig } from "../src/shared/agent-config.js";
import { exitedWithOutput } from "./support/child-exit.js";
import { INTERRUPTED_TEXT as SPEC_TEXT } from "./support/sleepy-sessions.js";

const S = "session-1";

function msg(seq: number, fields: Partial<MessageRow>): MessageRow {
  return {
    sessionId: S,
    seq,
    role: "user",
    content: "",
    toolCalls: null,
    toolCallId: null,
    callSeq: null,
    success: null,
    stopReason: null,
    runId: "r1",
    createdAtMs: 1_000 + seq * 100,
    ...fields,
  };
}

/**
 * A crash handled right: run r1 asks for append_file a1 and sleep z1, a1 runs, the worker
 * dies inside z1 (r1 ended `crashed` at 5000); resume r2 answers z1 as interrupted and the
 * model answers.
 */
function clean(): ChaosHistory {
  return {
    sessions: [
      { id: S, label: "c0", status: "active", tailState: "completed", parkedReason: null, lastSeq: 5 },
    ],
    messages: [
      msg(1, { content: "go" }),
      msg(2, {
        role: "assistant",
        stopReason: "tool_use",
        toolCalls: [
          { id: "a1", name: "append_file", arguments: { path: "c0/a1.log", line: "c0 a1" } },
          { id: "z1", name: "sleep", arguments: { ms: 1000 } },
        ],
      }),
      msg(3, { role: "tool", toolCallId: "a1", callSeq: 2, success: true, content: "appended" }),
      msg(4, {
        role: "tool",
        toolCallId: "z1",
        callSeq: 2,
        success: false,
        content: INTERRUPTED_TEXT,
        runId: "r2",
        createdAtMs: 5_100,
      }),
      msg(5, {
        role: "assistant",
        stopReason: "end_turn",
        content: "done c0",
        runId: "r2",
        createdAtMs: 5_200,
      }),
    ],
    runs: [
      {
        id: "r1",
        sessionId: S,
        kind: "run",
        resumeKind: null,
        trigger: "api",
        status: "ended",
        endedReason: "crashed",
        workerId: "w1",
        createdAtMs: 900,
        startedAtMs: 1_100,
        endedAtMs: 5_000,
      },
      {
        id: "r2",
        sessionId: S,
        kind: "resume",
        resumeKind: "recover_tools",
        trigger: "sweeper",
        status: "ended",
        endedReason: "completed",
        workerId: "w2",
        createdAtMs: 5_010,
        startedAtMs: 5_100,
        endedAtMs: 6_000,
      },
    ],
    files: [{ path: "c0/a1.log", lines: ["c0 a1"], mtimeMs: 1_250 }],
    starts: [],
  };
}

const S2 = "session-2";

/** The clean history plus a second session whose run r3 starts chaos_mark m1 at 7150. */
function withMark(): ChaosHistory {
  const h = clean();
  h.sessions.push({
    id: S2,
    label: "c1",
    status: "active",
    tailState: "completed",
    parkedReason: null,
    lastSeq: 4,
  });
  const at = (seq: number) => 7_000 + seq * 100;
  h.messages.push(
    msg(1, { sessionId: S2, runId: "r3", createdAtMs: at(1), content: "go" }),
    msg(2, {
      sessionId: S2,
      runId: "r3",
      createdAtMs: at(2),
      role: "assistant",
      stopReason: "tool_use",
      toolCalls: [{ id: "m1", name: "chaos_mark", arguments: { line: "c1 m1" } }],
    }),
    msg(3, {
      sessionId: S2,
      runId: "r3",
      createdAtMs: at(3),
      role: "tool",
      toolCallId: "m1",
      callSeq: 2,
      success: true,
    }),
    msg(4, { sessionId: S2, runId: "r3", createdAtMs: at(4), role: "assistant", stopReason: "end_turn" }),
  );
  h.runs.push({
    ...h.runs[0]!,
    id: "r3",
    sessionId: S2,
    endedReason: "completed",
    startedAtMs: at(1),
    endedAtMs: 7_500,
  });
  h.starts.push({ label: "c1", callId: "m1", atMs: 7_250 });
  return h;
}

const started = (runId: string): StreamEvent => ({ type: "RUN_STARTED", runId, seq: null, outcome: null });
const stored = (seq: number): StreamEvent => ({ type: "MESSAGE", runId: null, seq, outcome: null });
const ended = (runId: string, outcome: string): StreamEvent => ({
  type: "RUN_COMPLETED",
  runId,
  seq: null,
  outcome,
});

/** The marked history with the event streams a reader would get. */
function withStreams(emptiedUntilMs: number | null = null): ChaosHistory {
  const h = withMark();
  h.streams = {
    emptiedUntilMs,
    bySession: {
      [S]: [
        started("r1"),
        stored(1),
        stored(2),
        stored(3),
        ended("r1", "crashed"),
        started("r2"),
        stored(4),
        stored(5),
        ended("r2", "completed"),
      ],
      [S2]: [started("r3"), stored(1), stored(2), stored(3), stored(4), ended("r3", "completed")],
    },
  };
  return h;
}

/** A copy of the clean history (with the marked session) with `change` applied. */
function broken(change: (h: ChaosHistory) => void): ChaosHistory {
  const h = structuredClone(withMark());
  change(h);
  return h;
}

const message = (h: ChaosHistory, seq: number) => h.messages.find((m) => m.sessionId === S && m.seq === seq)!;
const details = (result: { violations: { detail: string }[] }) => result.violations.map((v) => v.detail);

describe("chaos checks", () => {
  it("use the exact text of resume-semantics §3", () => {
    expect(INTERRUPTED_TEXT).toBe(SPEC_TEXT);
  });

  it("pass a clean history with a crash, a resume and an interrupted result", () => {
    for (const result of runChecks(withMark())) expect(result.violations, result.name).toEqual([]);
  });

  it("seq: a gap, a repeat, and a last_seq that disagrees", () => {
    expect(details(checkSeqContiguous(broken((h) => (message(h, 5).seq = 6))))).toEqual([
      "seq 6 at position 5 (expected 5)",
    ]);
    expect(checkSeqContiguous(broken((h) => (message(h, 4).seq = 3))).violations).toHaveLength(1);
    expect(details(checkSeqContiguous(broken((h) => (h.sessions[0]!.lastSeq = 7))))).toEqual([
      "last_seq 7 but 5 messages stored",
    ]);
  });

  it("results: a call left unanswered, answered twice, or a result with no call", () => {
    const unanswered = broken((h) => {
      h.messages = h.messages.filter((m) => m.seq !== 4);
    });
    expect(details(checkOneResultPerCall(unanswered))).toEqual(["call z1 has no result"]);
    const twice = broken((h) => h.messages.splice(4, 0, { ...message(h, 4), seq: 5 }));
    expect(details(checkOneResultPerCall(twice))).toContain("call z1 has 2 results");
    const orphan = broken((h) => (message(h, 3).toolCallId = "nope"));
    expect(details(checkOneResultPerCall(orphan))).toEqual(
      expect.arrayContaining(["call a1 has no result", "result for nope answers no call of step 2"]),
    );
    const notOwed = broken((h) => (message(h, 2).stopReason = "interrupted"));
    expect(details(checkOneResultPerCall(notOwed))).toContain(
      'call a1 of a step that stopped "interrupted" has a result',
    );
  });

  it("results: a parked session may end with calls unanswered", () => {
    const parked = broken((h) => {
      h.messages = h.messages.filter((m) => m.seq < 4);
      h.sessions[0] = { ...h.sessions[0]!, status: "parked", parkedReason: "attempts_exhausted", lastSeq: 3 };
    });
    expect(checkOneResultPerCall(parked).violations).toEqual([]);
  });

  it("side effects: a line written twice, a file nobody asked for, an ok with no effect", () => {
    const twice = broken((h) => h.files[0]!.lines.push("c0 a1"));
    expect(details(checkSideEffectsOnce(twice))).toEqual(['"c0 a1" written 2 times to c0/a1.log']);
    const unasked = broken((h) => h.files.push({ path: "c0/a9.log", lines: ["c0 a9"], mtimeMs: 1_300 }));
    expect(details(checkSideEffectsOnce(unasked))).toEqual([
      "c0/a9.log was written, but no stored step asked for it",
    ]);
    const lost = broken((h) => (h.files = []));
    expect(details(checkSideEffectsOnce(lost))).toEqual(['call a1 answered ok but c0/a1.log has no "c0 a1"']);
  });

  it("tool starts: a call started twice, a start nobody asked for, an ok that never started", () => {
    const twice = broken((h) => h.starts.push({ label: "c1", callId: "m1", atMs: 7_260 }));
    expect(details(checkSideEffectsOnce(twice))).toEqual(["chaos_mark c1 m1 started 2 times"]);
    const unasked = broken((h) => h.starts.push({ label: "c1", callId: "m7", atMs: 7_260 }));
    expect(details(checkSideEffectsOnce(unasked))).toEqual([
      "chaos_mark c1 m7 started, but no stored step asked for it",
    ]);
    const never = broken((h) => (h.starts = []));
    expect(details(checkSideEffectsOnce(never))).toEqual([
      "call m1 answered ok but its start was never recorded",
    ]);
  });

  it("interrupted results: inexact text, marked ok, from the run itself, or a re-run by a later run", () => {
    const inexact = broken((h) => (message(h, 4).content = INTERRUPTED_TEXT.slice(0, -1)));
    expect(details(checkInterruptedText(inexact))).toEqual([
      expect.stringMatching(/^result for z1 looks interrupted but is not the exact text/),
      expect.stringMatching(/^call z1 \(run r1\) was answered by run r2 with .* not the interrupted text$/),
    ]);
    const ok = broken((h) => (message(h, 4).success = true));
    expect(details(checkInterruptedText(ok))).toEqual(["interrupted result for z1 is marked successful"]);
    const own = broken((h) => {
      message(h, 4).runId = "r1";
      message(h, 4).createdAtMs = 4_000;
    });
    expect(details(checkInterruptedText(own))).toEqual(["run r1 answered its own call z1 as interrupted"]);
    const rerun = broken((h) => {
      message(h, 4).content = "slept 1000 ms";
      message(h, 4).success = true;
    });
    expect(details(checkInterruptedText(rerun))[0]).toMatch(/answered by run r2 .* not the interrupted text/);
  });

  it("settled: active and unfinished, a run left running, parked with no reason", () => {
    const pending = broken((h) => (h.sessions[0]!.tailState = "tools_pending"));
    expect(checkSessionsSettled(pending).violations).toHaveLength(1);
    const running = broken((h) => {
      h.runs.push({ ...h.runs[1]!, id: "r3", status: "running", endedReason: null, endedAtMs: null });
    });
    expect(details(checkSessionsSettled(running))).toEqual(["resume run r3 is still running"]);
    const noReason = broken((h) => (h.sessions[0]!.status = "parked"));
    expect(checkSessionsSettled(noReason).violations).toHaveLength(1);
    const parked = broken((h) =>
      Object.assign(h.sessions[0]!, { status: "parked", parkedReason: "refused" }),
    );
    expect(checkSessionsSettled(parked).violations).toEqual([]);
    // Parked with a resume still queued (countRetry parks over it): it waits for an operator.
    const queuedRun = { ...clean().runs[1]!, id: "r3", status: "queued", endedReason: null, endedAtMs: null };
    const parkedQueued = broken((h) => {
      Object.assign(h.sessions[0]!, { status: "parked", parkedReason: "attempts_exhausted" });
      h.runs.push({ ...queuedRun, startedAtMs: null });
    });
    expect(checkSessionsSettled(parkedQueued).violations).toEqual([]);
    const completedQueued = broken((h) => h.runs.push({ ...queuedRun, startedAtMs: null }));
    expect(details(checkSessionsSettled(completedQueued))).toEqual(["resume run r3 is still queued"]);
  });

  it("appends: after the run was declared stalled, before it started, interleaved, overlapping runs", () => {
    // The frozen worker of r1 wakes after the sweeper ended r1 `stalled`, and appends.
    const late = broken((h) => {
      h.runs[0]!.endedReason = "stalled";
      h.runs[0]!.endedAtMs = 2_000;
      h.runs[1]!.startedAtMs = 2_600;
      message(h, 3).createdAtMs = 2_500;
    });
    expect(details(checkNoAppendAfterEnd(late))).toEqual([
      expect.stringMatching(/^seq 3 \(tool\) stored at .* by run r1, 500 ms after it ended stalled/),
    ]);
    const early = broken((h) => (message(h, 1).createdAtMs = 900));
    expect(details(checkNoAppendAfterEnd(early))[0]).toMatch(/before run r1 started/);
    const interleaved = broken((h) => {
      message(h, 5).runId = "r1";
      message(h, 5).createdAtMs = 4_900;
    });
    expect(details(checkNoAppendAfterEnd(interleaved))).toContain(
      "run r1 wrote seq 5 after run r2 had written",
    );
    const overlap = broken((h) => (h.runs[1]!.startedAtMs = 4_000));
    expect(details(checkNoAppendAfterEnd(overlap))[0]).toMatch(
      /^run r2 started at .* while run r1 was running/,
    );
  });

  it("tools: a start after its run was declared over; a write that could not have started before", () => {
    const lateStart = broken((h) => {
      h.runs[2]!.endedReason = "stalled";
      h.runs[2]!.endedAtMs = 7_220;
    });
    expect(details(checkNoToolAfterRunEnd(lateStart))).toEqual([
      expect.stringMatching(/^m1 started at .*, 30 ms after its run r3 ended stalled/),
    ]);
    // r1 was declared stalled at 1150, before its step (1200) was even stored; a1 then wrote.
    const lateWrite = broken((h) => {
      h.runs[0]!.endedReason = "stalled";
      h.runs[0]!.endedAtMs = 1_150;
    });
    expect(details(checkNoToolAfterRunEnd(lateWrite))).toEqual([
      expect.stringMatching(
        /^a1 wrote c0\/a1\.log at .*; it could start only at .*, after its run r1 ended stalled/,
      ),
    ]);
  });

  it("tools: a write after the end that could have started before is counted in flight, not a violation", () => {
    const inFlight = broken((h) => (h.files[0]!.mtimeMs = 5_050));
    const result = checkNoToolAfterRunEnd(inFlight);
    expect(result.violations).toEqual([]);
    expect(result.inFlight).toBe(1);
  });

  it("streams: a message missing or twice, a run's end twice, missing, with another outcome, or before the last message", () => {
    expect(runChecks(withStreams()).flatMap((r) => r.violations)).toEqual([]);
    const streamsOf = (
      change: (streams: Record<string, StreamEvent[]>) => void,
      emptiedUntilMs: number | null = null,
    ) => {
      const h = structuredClone(withStreams(emptiedUntilMs));
      change(h.streams!.bySession);
      return details(checkEventStreams(h));
    };
    expect(streamsOf((b) => b[S]!.splice(3, 1))).toEqual(["MESSAGE events are seqs 1,2,4,5, stored 1..5"]);
    expect(streamsOf((b) => b[S2]!.splice(2, 0, stored(1)))).toEqual([
      "MESSAGE events are seqs 1,1,2,3,4, stored 1..4",
    ]);
    expect(streamsOf((b) => b[S]!.push(ended("r2", "completed")))).toEqual(["run r2 has 2 RUN_COMPLETED"]);
    expect(streamsOf((b) => b[S2]!.pop())).toEqual(["run r3 has 0 RUN_COMPLETED"]);
    expect(streamsOf((b) => b[S]!.splice(4, 1))).toEqual(["run r1 has 0 RUN_COMPLETED"]);
    // Redis emptied at 4,000 (r1 ended at 5,000, within the settle time): r1's end may be gone;
    // the last runs' must be there. Emptied long before: r1's must be there too.
    expect(streamsOf((b) => b[S]!.splice(4, 1), 4_000)).toEqual([]);
    expect(streamsOf((b) => b[S2]!.pop(), 4_000)).toEqual(["run r3 has 0 RUN_COMPLETED"]);
    expect(streamsOf((b) => b[S]!.splice(4, 1), -10_000)).toEqual(["run r1 has 0 RUN_COMPLETED"]);
    expect(streamsOf((b) => (b[S2]![5] = ended("r3", "stalled")))).toEqual([
      "run r3 ended completed, its RUN_COMPLETED says stalled",
    ]);
    expect(
      streamsOf((b) => {
        b[S2] = [started("r3"), stored(1), stored(2), stored(3), ended("r3", "completed"), stored(4)];
      }),
    ).toEqual(["the last run's RUN_COMPLETED comes before MESSAGE 4"]);
  });

  it("describe a session with its seqs and runs", () => {
    const lines = describeSession(clean(), S, [4]);
    expect(lines[0]).toContain("session c0 session-1");
    expect(lines.find((l) => l.includes("→"))).toMatch(/4 .* tool z1 FAILED/);
    expect(lines.filter((l) => l.includes("run …"))).toHaveLength(7);
  });
});

describe("chaos plan", () => {
  const options = {
    sessions: 50,
    seed: 7,
    timeoutMs: 60_000,
    workers: 4,
    sweepers: 2,
    chaosRate: 1,
    leaseTtlMs: 2_000,
  };

  it("is the same for the same seed and differs for another", () => {
    expect(planChaos(options)).toEqual(planChaos(options));
    expect(planChaos({ ...options, seed: 8 }).events).not.toEqual(planChaos(options).events);
  });

  it("has valid agents, every kind of fault, and targets that exist", () => {
    const plan = planChaos(options);
    for (const s of plan.sessions) parseAgentConfig(s.agent);
    const actions = new Set(plan.events.map((e) => ("role" in e ? `${e.action} ${e.role}` : e.action)));
    expect([...actions].sort()).toEqual([
      "kill sweeper",
      "kill worker",
      "pg_terminate",
      "redis_restart",
      "stop sweeper",
      "stop worker",
    ]);
    for (const e of plan.events) {
      expect(e.atMs).toBeLessThanOrEqual(options.timeoutMs);
      if ("slot" in e) expect(e.slot).toBeLessThan(e.role === "worker" ? 4 : 2);
    }
    const faults = plan.sessions.flatMap((s) =>
      s.agent.model.provider === "scripted" ? s.agent.model.steps.map((step) => step.fault) : [],
    );
    expect(faults).toContain("stream_cut");
    expect(faults).toContain("connection");
  });
});

describe("a tiny chaos run", () => {
  it("passes every check, and keeps each worker's and sweeper's log", async () => {
    const logs = await mkdtemp(join(tmpdir(), "chaos-check-logs-"));
    const child = spawn(
      process.execPath,
      [
        "--import",
        "tsx",
        "bench/chaos.ts",
        "--sessions",
        "8",
        "--timeout",
        "15",
        "--settle",
        "30",
        "--seed",
        "11",
        "--logs",
        logs,
      ],
      { cwd: resolve(import.meta.dirname, ".."), stdio: ["ignore", "pipe", "pipe"] },
    );
    let out = "";
    child.stdout.on("data", (d) => (out += d));
    child.stderr.on("data", (d) => (out += d));
    const code = await exitedWithOutput(child);
    if (code !== 0) console.log(out);
    expect(code).toBe(0);
    expect(out).toMatch(/✓ seq contiguous from 1 +8 sessions/);
    expect(out).toMatch(/sessions +8 \(/);
    try {
      // One pino JSON log per process, named by role and pid, and the report's account of them.
      const files = await readdir(logs);
      expect(files.some((f) => /^worker-\d+\.log$/.test(f))).toBe(true);
      expect(files.some((f) => /^sweeper-\d+\.log$/.test(f))).toBe(true);
      expect(out).toMatch(/^kill → resume queued +(p50|none)/m);
      expect(out).toMatch(/── the slowest resumes after a worker SIGKILL/);
      expect(out).toContain(`logs of every worker and sweeper: ${logs}`);
    } finally {
      await rm(logs, { recursive: true, force: true });
    }
  }, 90_000);
});
