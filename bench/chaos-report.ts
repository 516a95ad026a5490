/**
 * What a chaos run prints after its checks: each check with its counts, the first offending
 * sessions with their seqs and runs, and the figures of the run.
 */
import { type ChaosHistory, type CheckResult, classifyResult, describeSession } from "./chaos-checks.js";
import type { UnexpectedExit } from "./chaos-fleet.js";
import { fmt, percentile } from "./support.js";

/** The faults a run injected. */
export type Tally = {
  workerKills: number;
  workerStops: number;
  workerStopsPastLease: number;
  sweeperKills: number;
  sweeperStops: number;
  pgTerminations: number;
  pgConnections: number;
  redisRestarts: number;
  /** When the private redis-server was last back from a restart (null: never restarted). */
  redisBackAtMs: number | null;
  skipped: number;
};

/** `a=3, b=1` from counts, largest first. */
export function countsLine(counts: Map<string, number>): string {
  if (counts.size === 0) return "none";
  return [...counts.entries()]
    .sort((a, b) => b[1] - a[1] || a[0].localeCompare(b[0]))
    .map(([k, n]) => `${k}=${n}`)
    .join(", ");
}

function countBy<T>(items: T[], key: (item: T) => string | null): Map<string, number> {
  const counts = new Map<string, number>();
  for (const item of items) {
    const k = key(item);
    if (k !== null) counts.set(k, (counts.get(k) ?? 0) + 1);
  }
  return counts;
}

/** A SIGKILL of a worker: when, and which worker. */
export type KillRecord = { workerId: string; atMs: number };

/**
 * From each SIGKILLed worker's interrupted runs to the start of the next run of the same
 * session (ms): how long a session waited for someone to pick it up again.
 */
export function killToResume(history: ChaosHistory, kills: KillRecord[]): number[] {
  const byWorker = new Map(kills.map((k) => [k.workerId, k.atMs]));
  const latencies: number[] = [];
  for (const run of history.runs) {
    const killedAt = run.workerId ? byWorker.get(run.workerId) : undefined;
    if (killedAt === undefined || run.endedReason !== "crashed") continue;
    const next = history.runs
      .filter((r) => r.sessionId === run.sessionId && r.startedAtMs !== null && r.startedAtMs > killedAt)
      .sort((a, b) => a.startedAtMs! - b.startedAtMs!)[0];
    if (next) latencies.push(next.startedAtMs! - killedAt);
  }
  return latencies;
}

/** The figures of a run, as label/value rows. */
export function figures(history: ChaosHistory, kills: KillRecord[]): [string, string][] {
  const completed = history.sessions.filter((s) => s.status === "active" && s.tailState === "completed");
  const parked = history.sessions.filter((s) => s.status === "parked");
  const resumes = history.runs.filter((r) => r.kind === "resume");
  const started = resumes.filter((r) => r.startedAtMs !== null);
  const assistant = history.messages.filter((m) => m.role === "assistant");
  const results = history.messages.filter((m) => m.role === "tool");
  const latencies = killToResume(history, kills);
  return [
    [
      "sessions",
      `${history.sessions.length} (${completed.length} completed, ${parked.length} parked` +
        `${parked.length ? `: ${countsLine(countBy(parked, (s) => (s.parkedReason ?? "?").split(":")[0]!))}` : ""})`,
    ],
    ["messages", String(history.messages.length)],
    [
      "model calls",
      `${assistant.length} responses stored (${countsLine(countBy(assistant, (m) => m.stopReason))})`,
    ],
    [
      "tool results",
      `${results.length} (${countsLine(countBy(results, (m) => classifyResult(m)))}); ${history.files.length} append_file effects`,
    ],
    ["runs by outcome", countsLine(countBy(history.runs, (r) => r.endedReason ?? r.status))],
    [
      "resumes by kind",
      `${started.length} started: ${countsLine(countBy(started, (r) => `${r.resumeKind ?? "?"} (${r.trigger})`))}` +
        (resumes.length > started.length ? `; ${resumes.length - started.length} never started` : ""),
    ],
    [
      "kill → next run start",
      latencies.length === 0
        ? "no session was on a killed worker"
        : `p50 ${Math.round(percentile(latencies, 50))} ms, p99 ${Math.round(percentile(latencies, 99))} ms, ` +
          `max ${Math.round(Math.max(...latencies))} ms over ${latencies.length} interrupted runs`,
    ],
  ];
}

export function report(
  history: ChaosHistory,
  results: CheckResult[],
  kills: KillRecord[],
  tally: Tally,
  fleet: { started: { workers: number; sweepers: number }; unexpected: UnexpectedExit[] },
  quiet: boolean,
  began: number,
): void {
  console.log("\n── checks ─────────────────────────────────────────");
  for (const r of results) {
    const ok = r.violations.length === 0;
    console.log(
      `${ok ? "✓" : "✗"} ${r.name.padEnd(50)} ${r.examined}${ok ? "" : `; ${r.violations.length} VIOLATIONS`}`,
    );
  }
  for (const r of results.filter((x) => x.violations.length > 0)) {
    console.log(`\n✗ ${r.name}: ${r.violations.length} violations; the first ones:`);
    for (const v of r.violations.slice(0, 5))
      console.log(
        `  - ${v.sessionId ? `${label(history, v.sessionId)}: ` : ""}${v.detail}${v.seqs.length ? ` (seq ${v.seqs.join(", ")})` : ""}`,
      );
    const sessions = [...new Set(r.violations.flatMap((v) => (v.sessionId ? [v.sessionId] : [])))].slice(
      0,
      2,
    );
    for (const id of sessions) {
      const seqs = r.violations.filter((v) => v.sessionId === id).flatMap((v) => v.seqs);
      for (const line of describeSession(history, id, seqs)) console.log(`    ${line}`);
    }
  }
  const unexpected = fleet.unexpected;
  console.log("\n── figures ────────────────────────────────────────");
  const rows: [string, string][] = [
    ...figures(history, kills),
    [
      "faults injected",
      `worker SIGKILL ${tally.workerKills}, worker SIGSTOP ${tally.workerStops} (${tally.workerStopsPastLease} longer than the lease), ` +
        `sweeper SIGKILL ${tally.sweeperKills}, sweeper SIGSTOP ${tally.sweeperStops}, ` +
        `Postgres terminations ${tally.pgTerminations} (${tally.pgConnections} connections), Redis restarts ${tally.redisRestarts}` +
        (tally.skipped ? `, ${tally.skipped} skipped (no target)` : ""),
    ],
    [
      "processes started",
      `${fleet.started.workers} workers, ${fleet.started.sweepers} sweepers; ${unexpected.length} exited on their own`,
    ],
    ["quiescent", quiet ? "yes" : "NO (timed out)"],
    ["elapsed", `${fmt((Date.now() - began) / 1000, 1)} s`],
  ];
  const width = Math.max(...rows.map(([k]) => k.length));
  for (const [k, v] of rows) console.log(`${k.padEnd(width)}  ${v}`);
  for (const u of unexpected.slice(0, 3))
    console.log(`\n${u.role} ${u.id} exited on its own (${u.how}):\n${u.tail}`);
}

function label(history: ChaosHistory, sessionId: string): string {
  return history.sessions.find((s) => s.id === sessionId)?.label ?? sessionId;
}
