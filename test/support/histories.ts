/** Histories the tests import, taken from the spec. */
import type { Message, StoredMessage } from "../../src/shared/messages.js";

/** resume-semantics.md §7.2: two write_file calls, only `a` answered; `b` was interrupted. */
export const CRASH_HISTORY: Message[] = [
  { role: "user", content: "Write a.txt and b.txt" },
  {
    role: "assistant",
    content: "",
    toolCalls: [
      { id: "a", name: "write_file", arguments: { path: "a.txt", content: "a" } },
      { id: "b", name: "write_file", arguments: { path: "b.txt", content: "b" } },
    ],
    stopReason: "tool_use",
  },
  { role: "tool", toolCallId: "a", name: "write_file", content: "wrote a.txt", success: true },
];

/**
 * `n` stored messages (a multiple of 4) from seq `from + 1`, one second apart from
 * 2025-01-01: a user's question, a step asking `write_file`, its result, an answer. Plain
 * (default): every result a success, every step's usage 10 + 1 tokens and every answer's
 * 20 + 2. `varied`: what an export must carry through as it is: non-ASCII text, a second line,
 * a failed result every other step, answers without usage, a providerState every 400 messages.
 */
export function storedHistory(n: number, from = 0, options: { varied?: boolean } = {}): StoredMessage[] {
  const varied = options.varied === true;
  const out: StoredMessage[] = [];
  for (let i = from; i < from + n; i += 4) {
    const at = (k: number) => new Date(Date.UTC(2025, 0, 1) + (i + k) * 1_000 + 7).toISOString();
    out.push(
      {
        role: "user",
        content: varied ? `question ${i} — ü 🚀` : `question ${i}`,
        seq: i + 1,
        createdAt: at(0),
      },
      {
        role: "assistant",
        content: "",
        toolCalls: [
          {
            id: `c${i}`,
            name: "write_file",
            arguments: varied ? { path: `${i}.txt`, n: [i] } : { path: `${i}.txt` },
          },
        ],
        stopReason: "tool_use",
        usage: { inputTokens: 10, outputTokens: 1 },
        seq: i + 2,
        createdAt: at(1),
      },
      {
        role: "tool",
        toolCallId: `c${i}`,
        name: "write_file",
        content: "ok",
        success: varied ? i % 8 === 0 : true,
        seq: i + 3,
        createdAt: at(2),
      },
      {
        role: "assistant",
        content: varied ? `answer ${i}\nline two` : `answer ${i}`,
        stopReason: "end_turn",
        usage: varied ? null : { inputTokens: 20, outputTokens: 2 },
        ...(varied && i % 400 === 0
          ? { providerState: { provider: "anthropic", blocks: [{ type: "thinking" }] } }
          : {}),
        seq: i + 4,
        createdAt: at(3),
      },
    );
  }
  return out;
}

/** A finished conversation of `n` messages (`n` even): `question i`, `answer i`, … */
export function questionsAndAnswers(n: number): Message[] {
  const out: Message[] = [];
  for (let i = 0; out.length < n; i++) {
    out.push({ role: "user", content: `question ${i}` });
    out.push({ role: "assistant", content: `answer ${i}`, stopReason: "end_turn" });
  }
  return out;
}

/** A stored `read_file` result of `chars` characters at `seq` (for tests of big event streams). */
export function bigToolResult(seq: number, chars = 3_000): StoredMessage {
  return {
    seq,
    createdAt: new Date(1_700_000_000_000 + seq).toISOString(),
    role: "tool",
    toolCallId: `call_${seq}`,
    name: "read_file",
    content: String(seq % 10).repeat(chars),
    success: true,
  } as StoredMessage;
}

/**
 * Batch entries `a` and `b` whose histories end with a final answer (`answer a`, `answer b`):
 * a batch of them has ended once it is created.
 */
export function answeredEntries<A>(agent: A) {
  return ["a", "b"].map((customId) => ({
    agent,
    customId,
    messages: [
      { role: "user" as const, content: "hi" },
      { role: "assistant" as const, content: `answer ${customId}`, stopReason: "end_turn" },
    ],
  }));
}
