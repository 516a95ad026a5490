/**
 * The invariants `npm run chaos` checks after a run, as pure functions over plain rows (read
 * from Postgres and the tool directory by bench/chaos-collect.ts). They do not use the
 * fleet's own resume logic: a checker that shares the code it checks would share its bugs.
 * test/chaos-check.test.ts feeds them hand-made histories that break each invariant.
 */

/** The exact result text of an interrupted call (resume-semantics.md §3). */
export const INTERRUPTED_TEXT =
  "The process stopped while this tool was running, so it may or may not have completed, and whatever it changes may or may not have happened. Check the current state before running it again.";

/** Results a cancelled run writes for its own calls (README, "The resume contract"). */
const CANCELLED_BEFORE_START = "Cancelled: the run was stopped before this tool started, so it did not run.";
const CANCELLED_WHILE_RUNNING = "Cancelled while running: ";

export type CallRow = { id: string; name: string; arguments: Record<string, unknown> };

export type SessionRow = {
  id: string;
  /** The chaos script's short name for the session (`c17`), also its folder in the tool dir. */
  label: string;
  status: string;
  tailState: string;
  parkedReason: string | null;
  lastSeq: number;
};

export type MessageRow = {
  sessionId: string;
  seq: number;
  role: string;
  content: string;
  toolCalls: CallRow[] | null;
  toolCallId: string | null;
  callSeq: number | null;
  success: boolean | null;
  stopReason: string | null;
  runId: string | null;
  createdAtMs: number;
};

export type RunRow = {
  id: string;
  sessionId: string;
  kind: string;
  resumeKind: string | null;
  trigger: string;
  status: string;
  endedReason: string | null;
  workerId: string | null;
  createdAtMs: number;
  startedAtMs: number | null;
  endedAtMs: number | null;
};

/** A file under FLEET_TOOL_DIR: its path relative to it, its lines, when it was last written. */
export type ToolFile = { path: string; lines: string[]; mtimeMs: number };

/** A start of a `chaos_mark` call, as the tool recorded it (bench/chaos-tools.ts). */
export type ToolStart = { label: string; callId: string; atMs: number };

/** An entry of a session's event stream (contracts §7), as far as the checks look at it. */
export type StreamEvent = { type: string; runId: string | null; seq: number | null; outcome: string | null };

export type ChaosHistory = {
  sessions: SessionRow[];
  messages: MessageRow[];
  runs: RunRow[];
  files: ToolFile[];
  starts: ToolStart[];
  /**
   * Each session's event stream, read after a reader's look (EventWriter.missingRunEnd);
   * `emptiedUntilMs`: when Redis was last back from a restart that emptied it (null: never),
   * so the ends of runs that ended before then (and a little after) may be gone.
   */
  streams?: { bySession: Record<string, StreamEvent[]>; emptiedUntilMs: number | null };
};

export type Violation = { sessionId: string | null; detail: string; seqs: number[] };

export type CheckResult = {
  name: string;
  /** What was looked at, e.g. "200 sessions, 2345 messages". */
  examined: string;
  violations: Violation[];
};

export type CheckOptions = {
  /** Clock slack when comparing Postgres timestamps with each other and with file mtimes. */
  toleranceMs: number;
};

export const DEFAULT_CHECK_OPTIONS: CheckOptions = { toleranceMs: 5 };

/** What a tool result says happened: for the figures printed next to the checks. */
export function classifyResult(
  m: Pick<MessageRow, "content" | "success">,
): "ok" | "interrupted" | "cancelled" | "failed" {
  if (m.success) return "ok";
  if (m.content === INTERRUPTED_TEXT) return "interrupted";
  if (m.content === CANCELLED_BEFORE_START || m.content.startsWith(CANCELLED_WHILE_RUNNING))
    return "cancelled";
  return "failed";
}

/** Where an append_file call of the chaos scripts writes, and the one line it writes. */
export function appendTarget(label: string, callId: string): { path: string; line: string } {
  return { path: `${label}/${callId}.log`, line: `${label} ${callId}` };
}

// ── indexes ─────────────────────────────────────────────────────────────────────────────

type Indexed = {
  bySession: Map<string, MessageRow[]>;
  runsById: Map<string, RunRow>;
  runsBySession: Map<string, RunRow[]>;
  sessionsById: Map<string, SessionRow>;
};

function index(history: ChaosHistory): Indexed {
  const bySession = new Map<string, MessageRow[]>();
  for (const m of history.messages) {
    const list = bySession.get(m.sessionId) ?? [];
    list.push(m);
    bySession.set(m.sessionId, list);
  }
  for (const list of bySession.values()) list.sort((a, b) => a.seq - b.seq);
  const runsBySession = new Map<string, RunRow[]>();
  for (const r of history.runs)
    runsBySession.set(r.sessionId, [...(runsBySession.get(r.sessionId) ?? []), r]);
  return {
    bySession,
    runsById: new Map(history.runs.map((r) => [r.id, r])),
    runsBySession,
    sessionsById: new Map(history.sessions.map((s) => [s.id, s])),
  };
}

/** Whether a step's calls are owed results: only a step that stopped normally runs tools. */
export function owesResults(m: MessageRow): boolean {
  return (
    m.role === "assistant" &&
    (m.toolCalls?.length ?? 0) > 0 &&
    (m.stopReason === "tool_use" || m.stopReason === "end_turn")
  );
}

const ms = (t: number | null) => (t === null ? "—" : new Date(t).toISOString().slice(11, 23));

// ── the checks ──────────────────────────────────────────────────────────────────────────

/** Per session, seq is 1..n with no gap or repeat, and the session row's last_seq is n. */
export function checkSeqContiguous(history: ChaosHistory): CheckResult {
  const { bySession } = index(history);
  const violations: Violation[] = [];
  for (const s of history.sessions) {
    const seqs = (bySession.get(s.id) ?? []).map((m) => m.seq);
    const bad = seqs.findIndex((seq, i) => seq !== i + 1);
    if (bad >= 0) {
      violations.push({
        sessionId: s.id,
        detail: `seq ${seqs[bad]} at position ${bad + 1} (expected ${bad + 1})`,
        seqs: seqs.slice(Math.max(0, bad - 1), bad + 2),
      });
    } else if (s.lastSeq !== seqs.length) {
      violations.push({
        sessionId: s.id,
        detail: `last_seq ${s.lastSeq} but ${seqs.length} messages stored`,
        seqs: seqs.slice(-1),
      });
    }
  }
  return {
    name: "seq contiguous from 1",
    examined: `${history.sessions.length} sessions, ${history.messages.length} messages`,
    violations,
  };
}

/**
 * Every call of a step that stopped normally has exactly one result, placed after the
 * step and before the next one; no result answers a call that does not exist. A parked
 * session may end with calls still unanswered (its resume is up to an operator).
 */
export function checkOneResultPerCall(history: ChaosHistory): CheckResult {
  const { bySession, sessionsById } = index(history);
  const violations: Violation[] = [];
  let calls = 0;
  for (const [sessionId, messages] of bySession) {
    const parked = sessionsById.get(sessionId)?.status === "parked";
    const steps = messages.filter((m) => m.role === "assistant");
    for (const [i, step] of steps.entries()) {
      const nextStepSeq = steps[i + 1]?.seq ?? Number.POSITIVE_INFINITY;
      const results = messages.filter((m) => m.role === "tool" && m.callSeq === step.seq);
      const owed = owesResults(step);
      for (const call of step.toolCalls ?? []) {
        const answers = results.filter((r) => r.toolCallId === call.id);
        if (!owed) {
          if (answers.length > 0)
            violations.push({
              sessionId,
              detail: `call ${call.id} of a step that stopped "${step.stopReason}" has a result`,
              seqs: [step.seq, ...answers.map((a) => a.seq)],
            });
          continue;
        }
        calls++;
        const trailing = nextStepSeq === Number.POSITIVE_INFINITY;
        if (answers.length === 0 && !(parked && trailing)) {
          violations.push({ sessionId, detail: `call ${call.id} has no result`, seqs: [step.seq] });
        } else if (answers.length > 1) {
          violations.push({
            sessionId,
            detail: `call ${call.id} has ${answers.length} results`,
            seqs: [step.seq, ...answers.map((a) => a.seq)],
          });
        }
        for (const a of answers) {
          if (a.seq < step.seq || a.seq > nextStepSeq)
            violations.push({
              sessionId,
              detail: `result of ${call.id} at seq ${a.seq} is outside its step (${step.seq}..${nextStepSeq})`,
              seqs: [step.seq, a.seq],
            });
        }
      }
      for (const r of results) {
        if (!(step.toolCalls ?? []).some((c) => c.id === r.toolCallId))
          violations.push({
            sessionId,
            detail: `result for ${r.toolCallId} answers no call of step ${step.seq}`,
            seqs: [step.seq, r.seq],
          });
      }
    }
    for (const r of messages) {
      if (r.role === "tool" && !steps.some((s) => s.seq === r.callSeq))
        violations.push({
          sessionId,
          detail: `result for ${r.toolCallId} points at seq ${r.callSeq}, which is no assistant step`,
          seqs: [r.seq],
        });
    }
  }
  return { name: "every tool call has exactly one result", examined: `${calls} owed calls`, violations };
}

/**
 * No side effect happened twice: each append_file line at most once in its file, each
 * chaos_mark call started at most once. Also no side effect without a recorded call, and no
 * call answered "ok" whose effect is missing.
 */
export function checkSideEffectsOnce(history: ChaosHistory): CheckResult {
  const { bySession } = index(history);
  const violations: Violation[] = [];
  const bySessionLabel = new Map(history.sessions.map((s) => [s.label, s]));
  const files = new Map(history.files.map((f) => [f.path, f]));
  for (const file of history.files) {
    const counts = new Map<string, number>();
    for (const line of file.lines) counts.set(line, (counts.get(line) ?? 0) + 1);
    const label = file.path.split("/")[0] ?? "";
    const session = bySessionLabel.get(label);
    for (const [line, n] of counts) {
      if (n > 1)
        violations.push({
          sessionId: session?.id ?? null,
          detail: `"${line}" written ${n} times to ${file.path}`,
          seqs: [],
        });
    }
    const callId = /^[^/]+\/([^/]+)\.log$/.exec(file.path)?.[1];
    const recorded =
      session && callId
        ? (bySession.get(session.id) ?? []).some((m) =>
            (m.toolCalls ?? []).some((c) => c.id === callId && c.name === "append_file"),
          )
        : false;
    if (!recorded)
      violations.push({
        sessionId: session?.id ?? null,
        detail: `${file.path} was written, but no stored step asked for it`,
        seqs: [],
      });
  }
  const startsOf = new Map<string, number>();
  for (const start of history.starts) {
    const key = `${start.label} ${start.callId}`;
    startsOf.set(key, (startsOf.get(key) ?? 0) + 1);
  }
  for (const [key, n] of startsOf) {
    const [label, callId] = key.split(" ") as [string, string];
    const session = bySessionLabel.get(label);
    if (n > 1)
      violations.push({
        sessionId: session?.id ?? null,
        detail: `chaos_mark ${key} started ${n} times`,
        seqs: [],
      });
    const recorded = session
      ? (bySession.get(session.id) ?? []).some((m) =>
          (m.toolCalls ?? []).some((c) => c.id === callId && c.name === "chaos_mark"),
        )
      : false;
    if (!recorded)
      violations.push({
        sessionId: session?.id ?? null,
        detail: `chaos_mark ${key} started, but no stored step asked for it`,
        seqs: [],
      });
  }
  let calls = 0;
  for (const s of history.sessions) {
    const messages = bySession.get(s.id) ?? [];
    for (const step of messages) {
      for (const call of step.toolCalls ?? []) {
        if (call.name === "chaos_mark" && owesResults(step)) {
          const ok = messages.find(
            (m) => m.role === "tool" && m.callSeq === step.seq && m.toolCallId === call.id && m.success,
          );
          if (ok && !startsOf.has(`${s.label} ${call.id}`))
            violations.push({
              sessionId: s.id,
              detail: `call ${call.id} answered ok but its start was never recorded`,
              seqs: [step.seq, ok.seq],
            });
        }
        if (call.name !== "append_file" || !owesResults(step)) continue;
        calls++;
        const ok = messages.find(
          (m) => m.role === "tool" && m.callSeq === step.seq && m.toolCallId === call.id && m.success,
        );
        const target = appendTarget(s.label, call.id);
        if (ok && !files.get(target.path)?.lines.includes(target.line))
          violations.push({
            sessionId: s.id,
            detail: `call ${call.id} answered ok but ${target.path} has no "${target.line}"`,
            seqs: [step.seq, ok.seq],
          });
      }
    }
  }
  return {
    name: "no side effect twice (files, tool starts)",
    examined: `${history.files.length} files, ${calls} append_file calls, ${history.starts.length} chaos_mark starts`,
    violations,
  };
}

/**
 * Interrupted results carry the exact §3 text and are failures written by a later run;
 * a result written by another run than the one that asked for the call can only be that
 * text (anything else means the call ran again); no other result looks interrupted.
 */
export function checkInterruptedText(history: ChaosHistory): CheckResult {
  const { bySession } = index(history);
  const violations: Violation[] = [];
  let interrupted = 0;
  for (const [sessionId, messages] of bySession) {
    const bySeq = new Map(messages.map((m) => [m.seq, m]));
    for (const r of messages) {
      if (r.role !== "tool") continue;
      const step = r.callSeq === null ? undefined : bySeq.get(r.callSeq);
      const exact = r.content === INTERRUPTED_TEXT;
      if (exact) interrupted++;
      const looksInterrupted = /process stopped while this tool|interrupted/i.test(r.content);
      if (looksInterrupted && !exact && !r.content.startsWith(CANCELLED_WHILE_RUNNING)) {
        violations.push({
          sessionId,
          detail: `result for ${r.toolCallId} looks interrupted but is not the exact text: "${r.content.slice(0, 80)}"`,
          seqs: [r.seq],
        });
      }
      if (exact && r.success !== false)
        violations.push({
          sessionId,
          detail: `interrupted result for ${r.toolCallId} is marked successful`,
          seqs: [r.seq],
        });
      if (exact && step && r.runId !== null && r.runId === step.runId)
        violations.push({
          sessionId,
          detail: `run ${r.runId} answered its own call ${r.toolCallId} as interrupted`,
          seqs: [step.seq, r.seq],
        });
      if (!exact && step && r.runId !== step.runId)
        violations.push({
          sessionId,
          detail: `call ${r.toolCallId} (run ${step.runId}) was answered by run ${r.runId} with "${r.content.slice(0, 60)}" — not the interrupted text`,
          seqs: [step.seq, r.seq],
        });
    }
  }
  return {
    name: "interrupted results carry the exact text",
    examined: `${interrupted} interrupted results`,
    violations,
  };
}

/**
 * Every session is completed, or parked with a reason; no run is left running, nor queued
 * but on a parked session (whose queued runs wait for someone to act).
 */
export function checkSessionsSettled(history: ChaosHistory): CheckResult {
  const { runsBySession } = index(history);
  const violations: Violation[] = [];
  for (const s of history.sessions) {
    const open = (runsBySession.get(s.id) ?? []).filter((r) => r.status !== "ended");
    const completed = s.status === "active" && s.tailState === "completed";
    const parked = s.status === "parked" && !!s.parkedReason;
    if (!completed && !parked)
      violations.push({
        sessionId: s.id,
        detail: `status ${s.status}, tail ${s.tailState}, parked reason ${s.parkedReason ?? "none"}`,
        seqs: [s.lastSeq],
      });
    for (const r of open) {
      // A session parked while a run of it was queued (its job re-added too often without the
      // run starting: AutomaticResumes.countRetry) keeps that run queued for whoever acts next
      // (an explicit resume joins it, a new message queues behind it): by design, not left over.
      if (parked && r.status === "queued" && r.startedAtMs === null) continue;
      violations.push({ sessionId: s.id, detail: `${r.kind} run ${r.id} is still ${r.status}`, seqs: [] });
    }
  }
  return {
    name: "every session completed or parked with a reason",
    examined: `${history.sessions.length} sessions, ${history.runs.length} runs`,
    violations,
  };
}

/**
 * Nothing acts for a run outside its lifetime: no message is stored by a run before it
 * started or after it ended, a run's messages are one contiguous block (a run that lost
 * the session never writes again after another run did), and runs of one session never
 * overlap.
 */
export function checkNoAppendAfterEnd(history: ChaosHistory, options = DEFAULT_CHECK_OPTIONS): CheckResult {
  const { bySession, runsById, runsBySession } = index(history);
  const violations: Violation[] = [];
  const slack = options.toleranceMs;
  for (const [sessionId, messages] of bySession) {
    const seen = new Set<string>();
    let current: string | null = null;
    for (const m of messages) {
      if (m.runId === null) continue;
      const run = runsById.get(m.runId);
      if (!run) {
        violations.push({ sessionId, detail: `seq ${m.seq} names unknown run ${m.runId}`, seqs: [m.seq] });
        continue;
      }
      if (run.startedAtMs === null || m.createdAtMs < run.startedAtMs - slack)
        violations.push({
          sessionId,
          detail: `seq ${m.seq} stored at ${ms(m.createdAtMs)}, before run ${run.id} started (${ms(run.startedAtMs)})`,
          seqs: [m.seq],
        });
      if (run.endedAtMs !== null && m.createdAtMs > run.endedAtMs + slack)
        violations.push({
          sessionId,
          detail: `seq ${m.seq} (${m.role}) stored at ${ms(m.createdAtMs)} by run ${run.id}, ${Math.round(m.createdAtMs - run.endedAtMs)} ms after it ended ${run.endedReason} at ${ms(run.endedAtMs)}`,
          seqs: [m.seq],
        });
      if (m.runId !== current) {
        if (seen.has(m.runId))
          violations.push({
            sessionId,
            detail: `run ${m.runId} wrote seq ${m.seq} after run ${current} had written`,
            seqs: [m.seq],
          });
        seen.add(m.runId);
        current = m.runId;
      }
    }
  }
  for (const [sessionId, runs] of runsBySession) {
    const started = runs
      .filter((r) => r.startedAtMs !== null)
      .sort((a, b) => (a.startedAtMs ?? 0) - (b.startedAtMs ?? 0));
    for (let i = 1; i < started.length; i++) {
      const prev = started[i - 1]!;
      const next = started[i]!;
      const prevEnd = prev.endedAtMs ?? Number.POSITIVE_INFINITY;
      if (next.startedAtMs! < prevEnd - slack)
        violations.push({
          sessionId,
          detail: `run ${next.id} started at ${ms(next.startedAtMs)} while run ${prev.id} was running (ended ${ms(prev.endedAtMs)})`,
          seqs: [],
        });
    }
  }
  return {
    name: "no message appended outside its run",
    examined: `${history.messages.length} messages, ${history.runs.length} runs`,
    violations,
  };
}

/**
 * No tool started after its run was declared over (for a run ended `stalled`/`crashed`,
 * when the sweeper or the next worker declared it). A chaos_mark records its own start, so
 * one that started after its run's end is a violation. An append_file shows only when its
 * write landed: a write after the end is a violation when the call could not even start
 * before the end (what preceded it in the run — the step, or the previous call's result —
 * was stored after it); otherwise the tool may have been in flight when its worker froze,
 * and it is counted in `inFlight`, not as a violation.
 */
export function checkNoToolAfterRunEnd(
  history: ChaosHistory,
  options = DEFAULT_CHECK_OPTIONS,
): CheckResult & { inFlight: number } {
  const { bySession, runsById } = index(history);
  const violations: Violation[] = [];
  const files = new Map(history.files.map((f) => [f.path, f]));
  const starts = new Map(history.starts.map((t) => [`${t.label} ${t.callId}`, t]));
  let marks = 0;
  let effects = 0;
  let inFlight = 0;
  for (const s of history.sessions) {
    const messages = bySession.get(s.id) ?? [];
    for (const step of messages) {
      const run = step.runId ? runsById.get(step.runId) : undefined;
      for (const [i, call] of (step.toolCalls ?? []).entries()) {
        const end = run?.endedAtMs;
        if (call.name === "chaos_mark") {
          const start = starts.get(`${s.label} ${call.id}`);
          if (!start) continue;
          marks++;
          if (end != null && start.atMs > end + options.toleranceMs)
            violations.push({
              sessionId: s.id,
              detail: `${call.id} started at ${ms(start.atMs)}, ${Math.round(start.atMs - end)} ms after its run ${run!.id} ended ${run!.endedReason} (${ms(end)})`,
              seqs: [step.seq],
            });
          continue;
        }
        if (call.name !== "append_file") continue;
        const file = files.get(appendTarget(s.label, call.id).path);
        if (!file) continue;
        effects++;
        if (end == null || file.mtimeMs <= end + options.toleranceMs) continue;
        // When the call could start at the earliest: the step, or the previous call's result.
        const earlier = new Set((step.toolCalls ?? []).slice(0, i).map((c) => c.id));
        const before = messages.filter(
          (m) =>
            m.runId === step.runId &&
            (m.seq === step.seq ||
              (m.role === "tool" && m.callSeq === step.seq && earlier.has(m.toolCallId ?? ""))),
        );
        const couldStart = Math.max(...before.map((m) => m.createdAtMs));
        if (couldStart > end + options.toleranceMs)
          violations.push({
            sessionId: s.id,
            detail: `${call.id} wrote ${file.path} at ${ms(file.mtimeMs)}; it could start only at ${ms(couldStart)}, after its run ${run!.id} ended ${run!.endedReason} (${ms(end)})`,
            seqs: [step.seq],
          });
        else inFlight++;
      }
    }
  }
  return {
    name: "no tool started after its run was declared over",
    examined:
      `${marks} chaos_mark starts, ${effects} append_file effects` +
      (inFlight ? ` (${inFlight} landed after their run's end: in flight when the worker froze)` : ""),
    violations,
    inFlight,
  };
}

/** After a Redis restart, how long writes sent around it may still have been lost (reconnects). */
const REDIS_SETTLE_MS = 5_000;

/**
 * Each session's event stream tells what Postgres holds: its MESSAGE events are the stored
 * messages, seq 1 to last_seq, once each and in order; no run has two RUN_COMPLETED; the
 * session's last run has its RUN_COMPLETED, with its outcome, after the last message. Every
 * run that ended while Redis kept what it was sent (not before it was last emptied, nor in
 * the REDIS_SETTLE_MS after) has exactly one, with its outcome.
 */
export function checkEventStreams(history: ChaosHistory): CheckResult {
  const name = "every event stream tells the stored history";
  if (!history.streams) return { name, examined: "no streams read", violations: [] };
  const { bySession, emptiedUntilMs } = history.streams;
  const kept = (run: RunRow) =>
    emptiedUntilMs === null || (run.endedAtMs ?? 0) > emptiedUntilMs + REDIS_SETTLE_MS;
  const { runsBySession } = index(history);
  const violations: Violation[] = [];
  let events = 0;
  for (const s of history.sessions) {
    const stream = bySession[s.id] ?? [];
    events += stream.length;
    const seqs = stream.filter((e) => e.type === "MESSAGE").map((e) => e.seq ?? -1);
    const expected = Array.from({ length: s.lastSeq }, (_, i) => i + 1);
    if (seqs.join(",") !== expected.join(","))
      violations.push({
        sessionId: s.id,
        detail: `MESSAGE events are seqs ${seqs.join(",") || "none"}, stored 1..${s.lastSeq}`,
        seqs: [],
      });
    const runs = runsBySession.get(s.id) ?? [];
    const last = runs.at(-1);
    for (const run of runs) {
      const ends = stream.flatMap((e, at) =>
        e.type === "RUN_COMPLETED" && e.runId === run.id ? [{ e, at }] : [],
      );
      const mustEnd = run.status === "ended" && (run === last || kept(run));
      if (ends.length > 1 || (mustEnd && ends.length === 0))
        violations.push({
          sessionId: s.id,
          detail: `run ${run.id} has ${ends.length} RUN_COMPLETED`,
          seqs: [],
        });
      const outcomes = ends.map(({ e }) => e.outcome).filter((o) => o !== run.endedReason);
      if (run.status === "ended" && outcomes.length > 0)
        violations.push({
          sessionId: s.id,
          detail: `run ${run.id} ended ${run.endedReason}, its RUN_COMPLETED says ${outcomes.join(", ")}`,
          seqs: [],
        });
      if (run === last && ends.length === 1) {
        const lastMessage = stream.findIndex((e) => e.type === "MESSAGE" && e.seq === s.lastSeq);
        if (lastMessage > ends[0]!.at)
          violations.push({
            sessionId: s.id,
            detail: `the last run's RUN_COMPLETED comes before MESSAGE ${s.lastSeq}`,
            seqs: [s.lastSeq],
          });
      }
    }
  }
  return {
    name,
    examined: `${history.sessions.length} streams, ${events} events${emptiedUntilMs === null ? "" : " (Redis was emptied: not every end before it)"}`,
    violations,
  };
}

export function runChecks(history: ChaosHistory, options = DEFAULT_CHECK_OPTIONS): CheckResult[] {
  return [
    checkSeqContiguous(history),
    checkOneResultPerCall(history),
    checkSideEffectsOnce(history),
    checkInterruptedText(history),
    checkSessionsSettled(history),
    checkNoAppendAfterEnd(history, options),
    checkNoToolAfterRunEnd(history, options),
    checkEventStreams(history),
  ];
}

/** A session's history and runs, one line each, for a violation report. */
export function describeSession(history: ChaosHistory, sessionId: string, around: number[] = []): string[] {
  const { bySession, runsBySession, sessionsById } = index(history);
  const s = sessionsById.get(sessionId);
  const short = (id: string | null) => (id ? id.slice(-8) : "—");
  const lines = [
    `session ${s?.label ?? "?"} ${sessionId}: status ${s?.status}, tail ${s?.tailState}${s?.parkedReason ? `, parked ${s.parkedReason}` : ""}`,
  ];
  const focus = new Set(around);
  for (const m of bySession.get(sessionId) ?? []) {
    let what: string;
    if (m.role === "assistant")
      what = `assistant ${m.stopReason}${m.toolCalls?.length ? ` [${m.toolCalls.map((c) => `${c.id} ${c.name}`).join(", ")}]` : ""}`;
    else if (m.role === "tool")
      what = `tool ${m.toolCallId} ${m.success ? "ok" : "FAILED"} "${m.content.slice(0, 40)}${m.content.length > 40 ? "…" : ""}"`;
    else what = `${m.role} "${m.content.slice(0, 40)}"`;
    lines.push(
      `  ${focus.has(m.seq) ? "→" : " "} ${String(m.seq).padStart(3)} ${ms(m.createdAtMs)} run …${short(m.runId)} ${what}`,
    );
  }
  for (const r of runsBySession.get(sessionId) ?? [])
    lines.push(
      `    run …${short(r.id)} ${r.kind}${r.resumeKind ? `/${r.resumeKind}` : ""} by ${r.trigger}: ${r.status} ${r.endedReason ?? ""} ` +
        `started ${ms(r.startedAtMs)} ended ${ms(r.endedAtMs)} on ${r.workerId ?? "—"}`,
    );
  return lines;
}
