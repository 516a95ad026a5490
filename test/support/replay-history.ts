/** A history of `count` stored messages of about `bytes` each, as a replay writes them (for tests). */
import type { StoredMessage } from "../../src/shared/messages.js";

export function replayHistory(
  count: number,
  bytes: number,
): { runId: string | null; message: StoredMessage }[] {
  const text = "x".repeat(bytes);
  return Array.from({ length: count }, (_, i) => ({
    runId: null,
    message: { seq: i + 1, role: "user", content: `${i + 1} ${text}`, createdAt: new Date(0).toISOString() },
  }));
}
