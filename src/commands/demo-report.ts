/** The demo's report, read straight from Postgres. */
import type { Database } from "../shared/db/client.js";

export type DemoReport = {
  sessions: number;
  completed: number;
  stopped: number;
  messages: number;
  toolCalls: number;
  toolCallsAnsweredTwice: number;
  runsByOutcome: Record<string, number>;
  resumesByKind: Record<string, number>;
};

export async function readReport(database: Database, ids: string[]): Promise<DemoReport> {
  const { sql } = database;
  const [counts] = await sql<{ completed: number; stopped: number; messages: number; tool_calls: number }[]>`
    select
      (select count(*)::int from sessions s where s.id = any(${ids}) and s.tail_state = 'completed'
         and not exists (select 1 from runs r where r.session_id = s.id and r.status <> 'ended')) as completed,
      (select count(*)::int from sessions s where s.id = any(${ids})
         and s.tail_state in ('refused', 'context_full', 'unknown_stop', 'malformed')) as stopped,
      (select count(*)::int from messages where session_id = any(${ids})) as messages,
      (select count(*)::int from messages where session_id = any(${ids}) and role = 'tool') as tool_calls`;
  const [twice] = await sql<{ n: number }[]>`
    select count(*)::int as n from (
      select session_id, call_seq, tool_call_id from messages
       where session_id = any(${ids}) and role = 'tool'
       group by 1, 2, 3 having count(*) > 1) d`;
  const outcomes = await sql<{ outcome: string; n: number }[]>`
    select coalesce(ended_reason, status) as outcome, count(*)::int as n from runs
     where session_id = any(${ids}) group by 1 order by 1`;
  const kinds = await sql<{ kind: string; trigger: string; n: number }[]>`
    select resume_kind as kind, trigger, count(*)::int as n from runs
     where session_id = any(${ids}) and kind = 'resume' and resume_kind is not null group by 1, 2 order by 1, 2`;
  return {
    sessions: ids.length,
    completed: counts!.completed,
    stopped: counts!.stopped,
    messages: counts!.messages,
    toolCalls: counts!.tool_calls,
    toolCallsAnsweredTwice: twice!.n,
    runsByOutcome: Object.fromEntries(outcomes.map((r) => [r.outcome, r.n])),
    resumesByKind: Object.fromEntries(kinds.map((r) => [`${r.kind} (${r.trigger})`, r.n])),
  };
}

export function formatReport(report: DemoReport, elapsedMs: number, toolDir: string): string {
  const lines = [
    "",
    "── report ─────────────────────────────────────────",
    `sessions            ${report.sessions} (${report.completed} completed, ${report.stopped} stopped)`,
    `messages            ${report.messages}`,
    `tool calls          ${report.toolCalls} (answered twice: ${report.toolCallsAnsweredTwice})`,
    `runs by outcome     ${
      Object.entries(report.runsByOutcome)
        .map(([k, v]) => `${k}=${v}`)
        .join(", ") || "none"
    }`,
    `resumes by kind     ${
      Object.entries(report.resumesByKind)
        .map(([k, v]) => `${k}=${v}`)
        .join(", ") || "none"
    }`,
    `elapsed             ${(elapsedMs / 1000).toFixed(1)} s`,
    `files written under ${toolDir}`,
  ];
  return lines.join("\n");
}
