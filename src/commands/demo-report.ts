/** The demo's report, read straight from Postgres. */
import type { Database } from "../shared/db/client.js";

export type DemoReport = {
  sessions: number;
  completed: number;
  stopped: number;
  insideTool: number;
  messages: number;
  toolCalls: number;
  toolCallsAnsweredTwice: number;
  interruptedToolCalls: number;
  resumes: number;
  runsByOutcome: Record<string, number>;
  resumesByKind: Record<string, number>;
  resumeStartedAt: Date[];
};

export async function readReport(database: Database, ids: string[]): Promise<DemoReport> {
  const { sql } = database;
  const [counts] = await sql<
    {
      completed: number;
      stopped: number;
      inside_tool: number;
      messages: number;
      tool_calls: number;
      interrupted: number;
    }[]
  >`
    select
      (select count(*)::int from sessions s where s.id in ${sql(ids)} and s.tail_state = 'completed'
         and not exists (select 1 from runs r where r.session_id = s.id and r.status <> 'ended')) as completed,
      (select count(*)::int from sessions s where s.id in ${sql(ids)} and s.status = 'parked') as stopped,
      (select count(*)::int from sessions s where s.id in ${sql(ids)} and s.tail_state = 'tools_pending') as inside_tool,
      (select count(*)::int from messages where session_id in ${sql(ids)}) as messages,
      (select count(*)::int from messages where session_id in ${sql(ids)} and role = 'tool') as tool_calls,
      (select count(*)::int from messages where session_id in ${sql(ids)} and role = 'tool'
          and content like 'The process stopped while this tool was running%') as interrupted`;
  const [twice] = await sql<{ n: number }[]>`
    select count(*)::int as n from (
      select session_id, call_seq, tool_call_id from messages
       where session_id in ${sql(ids)} and role = 'tool'
       group by 1, 2, 3 having count(*) > 1) d`;
  const outcomes = await sql<{ outcome: string; n: number }[]>`
    select coalesce(ended_reason, status) as outcome, count(*)::int as n from runs
     where session_id in ${sql(ids)} group by 1 order by 1`;
  const resumes = await sql<{ kind: string; trigger: string; started_at: string | null }[]>`
    select resume_kind as kind, trigger, started_at from runs
     where session_id in ${sql(ids)} and kind = 'resume' and resume_kind is not null`;
  const byKind: Record<string, number> = {};
  for (const r of resumes) byKind[`${r.kind} (${r.trigger})`] = (byKind[`${r.kind} (${r.trigger})`] ?? 0) + 1;
  return {
    sessions: ids.length,
    completed: counts!.completed,
    stopped: counts!.stopped,
    insideTool: counts!.inside_tool,
    messages: counts!.messages,
    toolCalls: counts!.tool_calls,
    toolCallsAnsweredTwice: twice!.n,
    interruptedToolCalls: counts!.interrupted,
    resumes: resumes.length,
    runsByOutcome: Object.fromEntries(outcomes.map((r) => [r.outcome, r.n])),
    resumesByKind: byKind,
    resumeStartedAt: resumes.flatMap((r) => (r.started_at ? [new Date(r.started_at)] : [])),
  };
}

function list(record: Record<string, number>): string {
  return (
    Object.entries(record)
      .map(([k, v]) => `${k}=${v}`)
      .join(", ") || "none"
  );
}

/**
 * The report's line on the shared log (pure): each session's line written once, more than
 * once, or not at all (an append_file answered as interrupted by the kill is not run again).
 * A missing line fails the demo as a repeated one does; the line said "written exactly once"
 * above that exit 1.
 */
export function appendsLine(appendsPerSession: number[]): string {
  const twice = appendsPerSession.filter((n) => n > 1).length;
  const missing = appendsPerSession.filter((n) => n === 0).length;
  const head = `append_file twice   ${twice} sessions`;
  if (twice === 0 && missing === 0) return `${head} (every session's log line was written exactly once)`;
  const more = twice > 0 ? " (a log line written MORE THAN ONCE)" : "";
  const none =
    missing > 0
      ? `; ${missing} ${missing === 1 ? "session's" : "sessions'"} log line MISSING (never written)`
      : "";
  return `${head}${more}${none}`;
}

export function formatReport(
  report: DemoReport,
  elapsedMs: number,
  toolDir: string,
  killedAt: number | null,
  appendsPerSession: number[],
): string {
  const lines = [
    "",
    "── report ─────────────────────────────────────────",
    `sessions            ${report.sessions} (${report.completed} completed, ${report.stopped} parked)`,
    `messages            ${report.messages}`,
    `tool calls          ${report.toolCalls} (${report.interruptedToolCalls} answered as interrupted, answered twice: ${report.toolCallsAnsweredTwice})`,
    appendsLine(appendsPerSession),
    `runs by outcome     ${list(report.runsByOutcome)}`,
    `resumes by kind     ${list(report.resumesByKind)}`,
  ];
  if (killedAt !== null) {
    const after = report.resumeStartedAt
      .map((d) => d.getTime() - killedAt)
      .filter((ms) => ms >= 0)
      .sort((a, b) => a - b);
    if (after.length > 0) {
      lines.push(
        `kill → resume       p50 ${after[Math.floor(after.length / 2)]} ms, max ${after.at(-1)} ms over ${after.length} sessions`,
      );
    }
  }
  lines.push(`elapsed             ${(elapsedMs / 1000).toFixed(1)} s`, `files written under ${toolDir}`);
  return lines.join("\n");
}
