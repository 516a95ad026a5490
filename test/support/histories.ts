/** Histories the tests import, taken from the spec. */
import type { Message } from "../../src/shared/messages.js";

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
