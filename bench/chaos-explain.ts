/**
 * Why the slowest interrupted runs of a chaos run waited: for each, the fault that ended it,
 * when a sweeper (which one) noticed, what it did, and what else the schedule did meanwhile,
 * from the workers' and sweepers' logs (pino JSON, one file per process) and the runs' rows.
 */
import { readdir, readFile } from "node:fs/promises";
import { basename, join } from "node:path";
import type { ChaosHistory, RunRow } from "./chaos-checks.js";
import type { KillRecord } from "./chaos-report.js";
import { fmt, percentile } from "./support.js";

/** The faults listed around one slow resume (from 2 s before its kill to its start). */
const MAX_FAULTS_SHOWN = 8;

/** One line of a fleet process's log; `proc` is its file's name (`sweeper-<pid>`, `worker-<pid>`). */
export type LogLine = {
  proc: string;
  time: number;
  msg: string;
  [field: string]: unknown;
};

/** A fault the schedule played: when (epoch ms) and what, as the run printed it. */
export type FaultRecord = { atMs: number; what: string };

/** Every JSON line of every `*.log` under `dir` (other lines — ready lines — are skipped). */
export async function readRoleLogs(dir: string): Promise<LogLine[]> {
  const lines: LogLine[] = [];
  for (const name of (await readdir(dir)).filter((n) => n.endsWith(".log")).sort()) {
    const proc = basename(name, ".log");
    for (const text of (await readFile(join(dir, name), "utf8")).split("\n")) {
      const line = parseLogLine(proc, text);
      if (line) lines.push(line);
    }
  }
  return lines.sort((a, b) => a.time - b.time);
}

export function parseLogLine(proc: string, text: string): LogLine | null {
  if (!text.startsWith("{")) return null;
  try {
    const parsed = JSON.parse(text) as Record<string, unknown>;
    if (typeof parsed.time !== "number" || typeof parsed.msg !== "string") return null;
    return { ...parsed, proc, time: parsed.time, msg: parsed.msg };
  } catch {
    return null; // a line cut by a SIGKILL
  }
}

/** An interrupted run on a SIGKILLed worker and the session's next run (as `killToResume` pairs them). */
export type Interrupted = { run: RunRow; kill: KillRecord; next: RunRow; waitedMs: number };

export function interruptedRuns(history: ChaosHistory, kills: KillRecord[]): Interrupted[] {
  const byWorker = new Map(kills.map((k) => [k.workerId, k]));
  const found: Interrupted[] = [];
  for (const run of history.runs) {
    const kill = run.workerId ? byWorker.get(run.workerId) : undefined;
    if (kill === undefined || run.endedReason !== "crashed") continue;
    const next = history.runs
      .filter((r) => r.sessionId === run.sessionId && r.startedAtMs !== null && r.startedAtMs > kill.atMs)
      .sort((a, b) => a.startedAtMs! - b.startedAtMs!)[0];
    if (next) found.push({ run, kill, next, waitedMs: next.startedAtMs! - kill.atMs });
  }
  return found;
}

/** What a sweeper's line says it did to a session, in a few words; null: not about that. */
function sweeperAction(line: LogLine): string | null {
  switch (line.msg) {
    case "run abandoned":
      return `ended run ${short(line.runId)} ${line.cause}`;
    case "resume enqueued":
      return (
        `resume ${short(line.runId)} queued (${line.kind}, attempt ${line.attempt}` +
        `${typeof line.delayMs === "number" ? `, delay ${line.delayMs} ms` : ""})`
      );
    case "session parked":
      return `parked: ${line.reason}${line.detail ? ` (${line.detail})` : ""}`;
    case "queued run re-enqueued":
      return `job of ${short(line.runId)} re-added (${line.state}, delay ${line.delayMs} ms)`;
    case "run claimed by a dead worker re-enqueued":
      return `job of ${short(line.runId)} re-added (claimed by dead ${line.workerId})`;
    case "sweep lock of a dead sweeper taken over":
      return `took over the sweep lock of dead ${line.holder}`;
    default:
      if (/fail/.test(line.msg)) return `${line.msg}: ${errorText(line.err)}`;
      return null;
  }
}

function errorText(err: unknown): string {
  const message = (err as { message?: unknown } | undefined)?.message;
  return typeof message === "string" ? message.split("\n")[0]! : "?";
}

function short(id: unknown): string {
  return typeof id === "string" ? id.slice(0, 8) : "?";
}

/** The workers up at `at`: started (logged "worker started") and not SIGKILLed by then. */
function workersUp(logs: LogLine[], kills: KillRecord[], at: number): string[] {
  const killedAt = new Map(kills.map((k) => [k.workerId, k.atMs]));
  return logs
    .filter((l) => l.msg === "worker started" && l.time <= at)
    .map((l) => String(l.workerId))
    .filter((id) => (killedAt.get(id) ?? Number.POSITIVE_INFINITY) > at);
}

/**
 * The `n` slowest interrupted runs, each as a few lines: the session and its wait, the
 * fault, each sweeper line about the session or its runs from the kill to the next start
 * (time after the kill, which sweeper, what it did), the start, the workers up when the
 * resume was queued, and the other faults meanwhile. `t0`: the origin of the printed schedule.
 */
export function explainSlowest(
  history: ChaosHistory,
  kills: KillRecord[],
  faults: FaultRecord[],
  logs: LogLine[],
  t0: number,
  n = 5,
  /** Which wait ranks them: the whole (kill → start) or the sweepers' part (kill → queued). */
  by: "start" | "queued" = "start",
): string[] {
  const at = (ms: number) => `${fmt((ms - t0) / 1000, 1)} s`;
  const after = (ms: number, from: number) => `+${fmt((ms - from) / 1000, 1)} s`.padStart(8);
  const out: string[] = [];
  const queuedAtOf = resumesQueuedAt(logs);
  const rank = (x: Interrupted) =>
    by === "start" ? x.waitedMs : (queuedAtOf.get(x.next.id) ?? x.next.createdAtMs) - x.kill.atMs;
  const slowest = interruptedRuns(history, kills)
    .sort((a, b) => rank(b) - rank(a))
    .slice(0, n);
  for (const [i, { run, kill, next, waitedMs }] of slowest.entries()) {
    const label = history.sessions.find((s) => s.id === run.sessionId)?.label ?? run.sessionId;
    const from = kill.atMs;
    const until = next.startedAtMs!;
    out.push(
      `${i + 1}. ${label} (session ${short(run.sessionId)}) waited ${fmt(waitedMs / 1000, 1)} s: ` +
        `run ${short(run.id)} on worker ${kill.workerId}, SIGKILLed at ${at(from)}`,
    );
    const ids = new Set([run.id, next.id]);
    const about = logs.filter(
      (l) =>
        l.proc.startsWith("sweeper") &&
        l.time >= from &&
        l.time <= until &&
        (l.sessionId === run.sessionId || ids.has(String(l.runId))),
    );
    let queuedAt: number | null = null;
    for (const line of about) {
      const action = sweeperAction(line);
      if (action === null) continue;
      if (line.msg === "resume enqueued" && line.runId === next.id) queuedAt = line.time;
      out.push(`   ${after(line.time, from)}  ${line.proc}: ${action}`);
    }
    if (!about.some((l) => l.msg === "run abandoned" && l.runId === run.id))
      out.push(`   ${" ".repeat(8)}  no sweeper logged ending run ${short(run.id)}`);
    out.push(
      `   ${after(until, from)}  ${next.workerId ?? "?"}: ${next.kind === "resume" ? `resume ${next.resumeKind ?? ""}` : "run"} ${short(next.id)} started` +
        ` (its run row created at ${after(next.createdAtMs, from).trim()})`,
    );
    const queued = queuedAt ?? next.createdAtMs;
    const up = workersUp(logs, kills, queued);
    // With none up, the resume waited for a replacement to start.
    const nextUp = logs.find((l) => l.msg === "worker started" && l.time > queued);
    out.push(
      `   workers up when it was queued: ${up.length}` +
        (up.length
          ? ` (${up.join(", ")})`
          : nextUp
            ? `; the next one started at ${after(nextUp.time, from).trim()}`
            : ""),
    );
    const meanwhile = faults.filter(
      (f) =>
        f.atMs > from - 2_000 && f.atMs <= until && !f.what.startsWith(`SIGKILL worker ${kill.workerId}`),
    );
    const shown = meanwhile.slice(0, MAX_FAULTS_SHOWN).map((f) => `${at(f.atMs)} ${f.what}`);
    if (meanwhile.length > shown.length) shown.push(`${meanwhile.length - shown.length} more`);
    if (shown.length) out.push(`   faults around it: ${shown.join("; ")}`);
  }
  return out;
}

/** When each resume was queued, by its run id (a sweeper's "resume enqueued" line). */
function resumesQueuedAt(logs: LogLine[]): Map<string, number> {
  return new Map(
    logs.filter((l) => l.msg === "resume enqueued").map((l) => [String(l.runId), l.time] as const),
  );
}

/**
 * The two halves of "kill → next run start": the sweeper's (kill → the resume queued, by its
 * "resume enqueued" line, else the run row's creation) and the workers' (queued → started,
 * a worker free or started meanwhile). As `p50 … ms, p99 … ms, max … ms`.
 */
export function splitWaits(history: ChaosHistory, kills: KillRecord[], logs: LogLine[]): [string, string][] {
  const queuedAt = resumesQueuedAt(logs);
  const sweeperSide: number[] = [];
  const workerSide: number[] = [];
  for (const { kill, next } of interruptedRuns(history, kills)) {
    const queued = queuedAt.get(next.id) ?? next.createdAtMs;
    sweeperSide.push(queued - kill.atMs);
    workerSide.push(next.startedAtMs! - queued);
  }
  const line = (samples: number[]) =>
    samples.length === 0
      ? "none"
      : `p50 ${Math.round(percentile(samples, 50))} ms, p99 ${Math.round(percentile(samples, 99))} ms, ` +
        `max ${Math.round(Math.max(...samples))} ms`;
  return [
    ["kill → resume queued", line(sweeperSide)],
    ["queued → started", line(workerSide)],
  ];
}

/**
 * Each sweep lock taken over from a dead sweeper ("sweep lock of a dead sweeper taken over",
 * its holder `<prefix>:sweeper:<pid>-<id>`): how long after that sweeper's SIGKILL (a fault
 * `SIGKILL sweeper sweeper-<pid>`), in ms; null where no such kill was played.
 */
export function lockTakeovers(faults: FaultRecord[], logs: LogLine[]): (number | null)[] {
  const killedAt = new Map<string, number>();
  for (const f of faults) {
    const pid = /^SIGKILL sweeper sweeper-(\d+)/.exec(f.what)?.[1];
    if (pid) killedAt.set(pid, f.atMs);
  }
  return logs
    .filter((l) => l.msg === "sweep lock of a dead sweeper taken over")
    .map((l) => {
      const pid = /:sweeper:(\d+)-/.exec(String(l.holder))?.[1];
      const at = pid ? killedAt.get(pid) : undefined;
      return at === undefined ? null : l.time - at;
    });
}
