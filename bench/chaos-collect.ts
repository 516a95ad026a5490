/**
 * Reads what a chaos run left behind — sessions, messages and runs from Postgres, the files
 * under FLEET_TOOL_DIR and the recorded tool starts — into the plain rows that
 * bench/chaos-checks.ts checks.
 */
import { readdir, readFile, stat } from "node:fs/promises";
import { join, relative } from "node:path";
import { Redis } from "ioredis";
import type postgres from "postgres";
import { openDatabase } from "../src/shared/db/client.js";
import { EventWriter } from "../src/shared/event-writer.js";
import { eventStreamKey } from "../src/shared/events.js";
import type {
  CallRow,
  ChaosHistory,
  MessageRow,
  RunRow,
  SessionRow,
  StreamEvent,
  ToolFile,
  ToolStart,
} from "./chaos-checks.js";

/** Every session, message and run of the scratch database, every tool file and tool start. */
export async function readHistory(
  sql: postgres.Sql,
  toolDir: string,
  markDir: string,
): Promise<ChaosHistory> {
  // Timestamps as epoch milliseconds with their microseconds, computed by Postgres.
  const sessions = await sql<
    {
      id: string;
      label: string;
      status: string;
      tail_state: string;
      parked_reason: string | null;
      last_seq: number;
    }[]
  >`select id, coalesce(metadata->>'chaos', id) as label, status, tail_state, parked_reason, last_seq
      from sessions order by created_at, id`;
  const messages = await sql<
    {
      session_id: string;
      seq: number;
      role: string;
      content: string;
      tool_calls: CallRow[] | null;
      tool_call_id: string | null;
      call_seq: number | null;
      success: boolean | null;
      stop_reason: string | null;
      run_id: string | null;
      created_ms: number;
    }[]
  >`select session_id, seq, role, content, tool_calls, tool_call_id, call_seq, success, stop_reason, run_id,
           (extract(epoch from created_at) * 1000)::float8 as created_ms
      from messages order by session_id, seq`;
  const runs = await sql<
    {
      id: string;
      session_id: string;
      kind: string;
      resume_kind: string | null;
      trigger: string;
      status: string;
      ended_reason: string | null;
      worker_id: string | null;
      created_ms: number;
      started_ms: number | null;
      ended_ms: number | null;
    }[]
  >`select id, session_id, kind, resume_kind, trigger, status, ended_reason, worker_id,
           (extract(epoch from created_at) * 1000)::float8 as created_ms,
           (extract(epoch from started_at) * 1000)::float8 as started_ms,
           (extract(epoch from ended_at) * 1000)::float8 as ended_ms
      from runs order by session_id, created_at, id`;
  return {
    sessions: sessions.map(
      (s): SessionRow => ({
        id: s.id,
        label: s.label,
        status: s.status,
        tailState: s.tail_state,
        parkedReason: s.parked_reason,
        lastSeq: s.last_seq,
      }),
    ),
    messages: messages.map(
      (m): MessageRow => ({
        sessionId: m.session_id,
        seq: m.seq,
        role: m.role,
        content: m.content,
        toolCalls: m.tool_calls,
        toolCallId: m.tool_call_id,
        callSeq: m.call_seq,
        success: m.success,
        stopReason: m.stop_reason,
        runId: m.run_id,
        createdAtMs: m.created_ms,
      }),
    ),
    runs: runs.map(
      (r): RunRow => ({
        id: r.id,
        sessionId: r.session_id,
        kind: r.kind,
        resumeKind: r.resume_kind,
        trigger: r.trigger,
        status: r.status,
        endedReason: r.ended_reason,
        workerId: r.worker_id,
        createdAtMs: r.created_ms,
        startedAtMs: r.started_ms,
        endedAtMs: r.ended_ms,
      }),
    ),
    files: await readToolFiles(toolDir),
    starts: (await readToolFiles(markDir)).flatMap((file) =>
      file.lines.map((line): ToolStart => {
        const [label = "", callId = "", at = ""] = line.split(" ");
        return { label, callId, atMs: Number(at) };
      }),
    ),
  };
}

/** Every regular file under `root` (recursively): its lines and last write time. */
/**
 * Each session's event stream, after a reader's look at it (the API's `missingRunEnd`, as a
 * reader opening the stream would make): what a client following the session would get.
 */
export async function readStreams(
  databaseUrl: string,
  redisUrl: string,
  prefix: string,
  sessionIds: readonly string[],
): Promise<Record<string, StreamEvent[]>> {
  const database = openDatabase(databaseUrl, { max: 2 });
  const redis = new Redis(redisUrl, { maxRetriesPerRequest: 3 });
  try {
    const writer = new EventWriter(redis, prefix);
    const bySession: Record<string, StreamEvent[]> = {};
    for (const id of sessionIds) {
      await writer.missingRunEnd(database, id, 0);
      const rows = (await redis.xrange(eventStreamKey(prefix, id), "-", "+")) as [string, string[]][];
      bySession[id] = rows.map(([, fields]) => {
        const data = JSON.parse(fields[fields.indexOf("data") + 1] ?? "{}") as {
          runId?: string | null;
          outcome?: string;
          message?: { seq?: number };
        };
        return {
          type: fields[fields.indexOf("type") + 1] ?? "",
          runId: data.runId ?? null,
          seq: data.message?.seq ?? null,
          outcome: data.outcome ?? null,
        };
      });
    }
    return bySession;
  } finally {
    redis.disconnect();
    await database.close();
  }
}

export async function readToolFiles(root: string): Promise<ToolFile[]> {
  const files: ToolFile[] = [];
  const walk = async (dir: string): Promise<void> => {
    for (const entry of await readdir(dir, { withFileTypes: true })) {
      const path = join(dir, entry.name);
      if (entry.isDirectory()) await walk(path);
      else if (entry.isFile()) {
        const [text, info] = await Promise.all([readFile(path, "utf8"), stat(path)]);
        files.push({
          path: relative(root, path),
          lines: text.split("\n").filter((line) => line !== ""),
          mtimeMs: info.mtimeMs,
        });
      }
    }
  };
  await walk(root);
  return files.sort((a, b) => a.path.localeCompare(b.path));
}
