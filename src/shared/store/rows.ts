/** Conversions between stored rows and the public JSON of contracts.md. */

import type { RunJson } from "../api-types.js";
import type { MessageRow, RunRow, SessionRow } from "../db/schema.js";
import type { ImportedMessage, Message, StoredMessage } from "../messages.js";
import { tenantWorkerId } from "../worker-ref.js";

export type { RunJson };

export function messageFromRow(row: MessageRow): StoredMessage {
  return storedMessage(row, row.createdAt.toISOString());
}

/** A message row's fields, `createdAt` aside. */
export type MessageFields = Omit<MessageRow, "createdAt" | "callSeq" | "runId">;

/** The stored message of a row's fields, created at `createdAt` (ISO 8601, UTC, milliseconds). */
export function storedMessage(row: MessageFields, createdAt: string): StoredMessage {
  const base = { seq: row.seq, createdAt };
  switch (row.role) {
    case "user":
    case "internal":
      return { role: row.role, content: row.content, ...base };
    case "assistant":
      return {
        role: "assistant",
        content: row.content,
        ...(row.toolCalls && row.toolCalls.length > 0 ? { toolCalls: row.toolCalls } : {}),
        stopReason: row.stopReason ?? "",
        // contracts §13: `null` when the provider reported nothing (or nothing is known).
        usage: row.usage ?? null,
        ...(row.providerState ? { providerState: row.providerState } : {}),
        ...base,
      };
    case "tool":
      return {
        role: "tool",
        toolCallId: row.toolCallId ?? "",
        name: row.name ?? "",
        content: row.content,
        success: row.success ?? false,
        ...base,
      };
    default:
      throw new Error(`stored message ${row.sessionId}#${row.seq} has unknown role ${row.role}`);
  }
}

/** The row fields of a message about to be stored at `seq`; `callSeq` from the step it follows. */
export type NewMessageRow = {
  seq: number;
  role: string;
  content: string;
  tool_calls: unknown;
  tool_call_id: string | null;
  call_seq: number | null;
  name: string | null;
  success: boolean | null;
  stop_reason: string | null;
  usage: unknown;
  provider_state: unknown;
  /** An imported message's own `createdAt` (ImportedMessage), else null: stored now. */
  created_at?: string | null;
};

/**
 * Numbers `messages` after `lastSeq` and links each tool result to the seq of the assistant
 * step it answers (`lastStepSeq` is the seq of the latest assistant message already stored).
 */
export function toNewRows(
  messages: readonly Message[],
  lastSeq: number,
  lastStepSeq: number | null,
): NewMessageRow[] {
  let stepSeq = lastStepSeq;
  return messages.map((m, i) => {
    const seq = lastSeq + i + 1;
    if (m.role === "assistant") stepSeq = seq;
    return {
      seq,
      role: m.role,
      content: m.content,
      tool_calls: m.role === "assistant" && m.toolCalls?.length ? m.toolCalls : null,
      tool_call_id: m.role === "tool" ? m.toolCallId : null,
      call_seq: m.role === "tool" ? stepSeq : null,
      name: m.role === "tool" ? m.name : null,
      success: m.role === "tool" ? m.success : null,
      stop_reason: m.role === "assistant" ? m.stopReason : null,
      usage: m.role === "assistant" ? (m.usage ?? null) : null,
      provider_state: m.role === "assistant" ? (m.providerState ?? null) : null,
      created_at: (m as ImportedMessage).createdAt ?? null,
    };
  });
}

/** Seq of the latest assistant message in a stored history, or null. */
export function lastStepSeq(history: readonly StoredMessage[]): number | null {
  for (let i = history.length - 1; i >= 0; i--) if (history[i]!.role === "assistant") return history[i]!.seq;
  return null;
}

/** A runs row as Postgres' row_to_json gives it (snake case, timestamps as text). */
export type RawRun = {
  id: string;
  session_id: string;
  tenant: string;
  /** Absent in rows read before the column existed (migration 0017). */
  batch_id?: string | null;
  kind: RunRow["kind"];
  resume_kind: string | null;
  trigger: string;
  status: RunRow["status"];
  ended_reason: string | null;
  error: string | null;
  input: string | null;
  model: RunRow["model"];
  /** Absent in rows read before the column existed. */
  goal?: RunRow["goal"];
  worker_id: string | null;
  last_sign_at: string | null;
  job_id: string | null;
  /** Absent on runs read before migration 0027. */
  retry_key?: string | null;
  usage: RunRow["usage"];
  created_at: string;
  /** Absent in rows read before the column existed (migration 0021). */
  queue_seq?: number | string;
  started_at: string | null;
  ended_at: string | null;
};

const date = (value: string | null): Date | null => (value === null ? null : new Date(value));

/** Drizzle's postgres.js driver leaves json values as text; plain postgres.js parses them. */
export function json<T>(value: unknown): T {
  return (typeof value === "string" ? JSON.parse(value) : value) as T;
}

/** A sessions row as row_to_json gives it. */
export type RawSession = {
  id: string;
  tenant: string;
  agent: SessionRow["agent"];
  metadata: SessionRow["metadata"];
  status: string;
  tail_state: string;
  /** Absent in rows read before the column existed. */
  tail_phase?: string;
  last_seq: number;
  lease_epoch: number;
  lease_owner: string | null;
  run_started: boolean;
  resume_attempts: number;
  attempt_point: string | null;
  attempt_seq: number;
  model_calls: number;
  /** Absent in rows read before the column existed. */
  model_call_key?: string | null;
  tokens_used: number | string;
  next_resume_at: string | null;
  parked_reason: string | null;
  last_active_at: string;
  created_at: string;
  updated_at: string;
  batch_id: string | null;
  custom_id: string | null;
  cancelled_at: string | null;
  /** Absent in rows read before the column existed. */
  session_events?: boolean;
  /** Absent in rows read before the columns existed (migration 0024). */
  history_bytes?: number | string;
  history_bytes_seq?: number;
  /** Absent in rows read before the column existed (migration 0026). */
  cancelled_runs?: string[] | null;
  /** Absent in rows read before the column existed (migration 0028). */
  park_announcement?: { id: string; reason: string; runs: string[] } | string | null;
};

export function sessionFromRaw(raw: RawSession): SessionRow {
  return {
    id: raw.id,
    tenant: raw.tenant,
    agent: raw.agent,
    metadata: raw.metadata,
    status: raw.status,
    tailState: raw.tail_state,
    tailPhase:
      raw.tail_phase ??
      (raw.tail_state === "completed" || raw.tail_state === "empty" ? raw.tail_state : "open"),
    lastSeq: raw.last_seq,
    leaseEpoch: Number(raw.lease_epoch),
    leaseOwner: raw.lease_owner,
    runStarted: raw.run_started,
    resumeAttempts: raw.resume_attempts,
    attemptPoint: raw.attempt_point,
    attemptSeq: raw.attempt_seq,
    modelCalls: raw.model_calls,
    modelCallKey: raw.model_call_key ?? null,
    tokensUsed: Number(raw.tokens_used),
    nextResumeAt: date(raw.next_resume_at),
    parkedReason: raw.parked_reason,
    lastActiveAt: new Date(raw.last_active_at),
    createdAt: new Date(raw.created_at),
    updatedAt: new Date(raw.updated_at),
    batchId: raw.batch_id ?? null,
    customId: raw.custom_id ?? null,
    cancelledAt: date(raw.cancelled_at ?? null),
    sessionEvents: raw.session_events !== false,
    historyBytes: Number(raw.history_bytes ?? 0),
    historyBytesSeq: raw.history_bytes_seq ?? 0,
    cancelledRuns: raw.cancelled_runs ?? null,
    parkAnnouncement: raw.park_announcement == null ? null : json(raw.park_announcement),
  };
}

/** A messages row as row_to_json gives it. */
export type RawMessage = {
  session_id: string;
  seq: number;
  role: string;
  content: string;
  tool_calls: MessageRow["toolCalls"];
  tool_call_id: string | null;
  call_seq: number | null;
  name: string | null;
  success: boolean | null;
  stop_reason: string | null;
  usage: MessageRow["usage"];
  /** Absent in rows read before the column existed. */
  provider_state?: MessageRow["providerState"];
  run_id: string | null;
  created_at: string;
};

export function messageFromRaw(raw: RawMessage): StoredMessage {
  return messageFromRow({
    sessionId: raw.session_id,
    seq: raw.seq,
    role: raw.role,
    content: raw.content,
    toolCalls: raw.tool_calls,
    toolCallId: raw.tool_call_id,
    callSeq: raw.call_seq,
    name: raw.name,
    success: raw.success,
    stopReason: raw.stop_reason,
    usage: raw.usage,
    providerState: raw.provider_state ?? null,
    runId: raw.run_id,
    createdAt: new Date(raw.created_at),
  });
}

export function runFromRaw(raw: RawRun): RunRow {
  return {
    id: raw.id,
    sessionId: raw.session_id,
    tenant: raw.tenant,
    batchId: raw.batch_id ?? null,
    kind: raw.kind,
    resumeKind: raw.resume_kind,
    trigger: raw.trigger,
    status: raw.status,
    endedReason: raw.ended_reason,
    error: raw.error,
    input: raw.input,
    model: raw.model,
    goal: raw.goal ?? null,
    workerId: raw.worker_id,
    lastSignAt: date(raw.last_sign_at),
    jobId: raw.job_id,
    retryKey: raw.retry_key ?? null,
    usage: raw.usage,
    createdAt: new Date(raw.created_at),
    queueSeq: Number(raw.queue_seq ?? 0),
    startedAt: date(raw.started_at),
    endedAt: date(raw.ended_at),
  };
}

export function runToJson(row: RunRow): RunJson {
  return {
    id: row.id,
    kind: row.kind,
    resumeKind: row.resumeKind,
    trigger: row.trigger,
    status: row.status,
    endedReason: row.endedReason,
    error: row.error,
    // Tenants read this: an opaque id of the worker, not its host name and pid (worker-ref.ts).
    workerId: tenantWorkerId(row.workerId),
    model: row.model ?? null,
    usage: row.usage ?? null,
    createdAt: row.createdAt.toISOString(),
    startedAt: row.startedAt?.toISOString() ?? null,
    endedAt: row.endedAt?.toISOString() ?? null,
  };
}
