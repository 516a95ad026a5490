/** Conversions between stored rows and the public JSON of contracts.md. */

import type { MessageRow, RunRow } from "../db/schema.js";
import type { Message, StoredMessage } from "../messages.js";

export function messageFromRow(row: MessageRow): StoredMessage {
  const base = { seq: row.seq, createdAt: row.createdAt.toISOString() };
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
        ...(row.usage ? { usage: row.usage } : {}),
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
    };
  });
}

/** Seq of the latest assistant message in a stored history, or null. */
export function lastStepSeq(history: readonly StoredMessage[]): number | null {
  for (let i = history.length - 1; i >= 0; i--) if (history[i]!.role === "assistant") return history[i]!.seq;
  return null;
}

export type RunJson = {
  id: string;
  kind: string;
  resumeKind: string | null;
  trigger: string;
  status: string;
  endedReason: string | null;
  error: string | null;
  workerId: string | null;
  usage: unknown;
  createdAt: string;
  startedAt: string | null;
  endedAt: string | null;
};

export function runToJson(row: RunRow): RunJson {
  return {
    id: row.id,
    kind: row.kind,
    resumeKind: row.resumeKind,
    trigger: row.trigger,
    status: row.status,
    endedReason: row.endedReason,
    error: row.error,
    workerId: row.workerId,
    usage: row.usage ?? null,
    createdAt: row.createdAt.toISOString(),
    startedAt: row.startedAt?.toISOString() ?? null,
    endedAt: row.endedAt?.toISOString() ?? null,
  };
}
