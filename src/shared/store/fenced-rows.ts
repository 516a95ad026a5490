/**
 * The fenced writes' pure half: the fence and cursor every write proves, an append as the
 * statements take it, the messages as stored from the rows a statement inserted, and the
 * texts Postgres can hold. No I/O (fenced-writes.ts sends them).
 */
import type { Message, StoredMessage } from "../messages.js";
import type { TailState } from "../tail-state.js";
import { withFields } from "../with-fields.js";
import type { SessionAppend } from "./grouped-appends.js";
import { historyBytes } from "./history-bytes.js";
import { toNewRows } from "./rows.js";

/** What a writer proves on every write: the session and its epoch. */
export type Fence = { sessionId: string; epoch: number };

/** Where a history stands, so the next append can be numbered and checked. */
export type HistoryCursor = { lastSeq: number; lastStepSeq: number | null };

/** An append as the statements take it: numbered after `cursor`, fenced by `fence`. */
export function sessionAppend(
  fence: Fence,
  cursor: HistoryCursor,
  runId: string | null,
  messages: readonly Message[],
  tail: TailState,
  estimatedTokens: number,
): SessionAppend {
  return {
    sessionId: fence.sessionId,
    epoch: fence.epoch,
    lastSeq: cursor.lastSeq,
    tail,
    // A negative `estimatedTokens`: what the messages' usage holds that was counted already.
    tokens: Math.max(0, tokensOf(messages) + Math.ceil(estimatedTokens)),
    bytes: historyBytes(messages),
    runId,
    rows: toNewRows(messages, cursor.lastSeq, cursor.lastStepSeq),
  };
}

/** The parked reason stored when a limit parks the session in the statement that ends its run. */
export function parkedReason(park: { reason: string; detail?: string } | undefined): string | null {
  return park ? stripNul(park.detail ? `${park.reason}: ${park.detail}` : park.reason) : null;
}

/** Tokens the model steps among `messages` reported (for `agent.budget.maxTokens`). */
function tokensOf(messages: readonly Message[]): number {
  let tokens = 0;
  for (const m of messages)
    if (m.role === "assistant" && m.usage) tokens += m.usage.inputTokens + m.usage.outputTokens;
  return tokens;
}

/** Postgres text cannot hold U+0000; error texts may quote what a model or tool produced. */
export function stripNul(text: string): string {
  return text.includes("\u0000") ? text.replaceAll("\u0000", "\uFFFD") : text;
}

/** The messages as stored: each with the `seq` and `created_at` its statement inserted for it. */
export function stored(
  messages: readonly Message[],
  inserted: readonly { seq: number; created_at: string | Date }[],
): StoredMessage[] {
  const bySeq = [...inserted].sort((a, b) => a.seq - b.seq);
  // Filled by push, not by `.map`, whose arrays have one elements kind from the builtin and
  // another from optimized code that inlines it: the agent loop's reads of these arrays were
  // optimized for one and thrown away at the first of the other (event-writer.ts).
  const out: StoredMessage[] = [];
  for (const [i, m] of messages.entries()) {
    const seq = bySeq[i]!.seq;
    const createdAt = new Date(bySeq[i]!.created_at).toISOString();
    // Not `{ ...m, seq, … }`, which made new hidden classes for each message (with-fields.ts).
    // As a read gives it back (rows.ts): unknown usage is `null`, so a MESSAGE event is
    // exactly the stored message (contracts §7, §13).
    out.push(
      m.role === "assistant"
        ? withFields(m, { usage: m.usage ?? null, seq, createdAt })
        : withFields(m, { seq, createdAt }),
    );
  }
  return out;
}
