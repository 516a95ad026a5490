/**
 * A session's history bound within a run (README "Limits that always hold"): once the
 * history holds more than MAX_HISTORY_BYTES (about 32 MiB, the measure of
 * shared/store/history-bytes.ts), the agent loop makes no more model calls and the run ends
 * `budget_exhausted`, parking the session with this reason. A step may be up to
 * FLEET_MODEL_MAX_OUTPUT_CHARS and a run up to maxTurns (1,000) of them: a model that answered
 * 3 MB and a tool call each time grew a session by gigabytes in one run, which every later
 * claim, whole read and model request held in full. Past the bound by at most one step (and
 * its tool results). The sum is kept with the history array (growing-fold.ts): each question
 * weighs only the messages appended since.
 */
import { GrowingFold } from "../shared/growing-fold.js";
import type { Message } from "../shared/messages.js";
import { historyBytes, MAX_HISTORY_BYTES } from "../shared/store/history-bytes.js";

const held = GrowingFold.sumOf<Message>((message) => historyBytes([message]));

const mebibytes = (bytes: number) => (bytes / 1024 / 1024).toFixed(1).replace(/\.0$/, "");

/** Why no model call may be made on `history` (it holds more than `max` bytes), or null. */
export function historyFull(history: readonly Message[], max: number = MAX_HISTORY_BYTES): string | null {
  const bytes = held.of(history);
  if (bytes <= max) return null;
  return (
    `history: the session's history holds about ${mebibytes(bytes)} MiB, past the ${mebibytes(max)} MiB ` +
    "a session's history may hold (no model could be sent more): continue in a new session"
  );
}
