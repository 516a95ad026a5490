/**
 * A session's history bound within a run (README "Limits that always hold"): once the
 * history holds more than MAX_HISTORY_BYTES (about 32 MiB, the measure of
 * shared/store/history-bytes.ts), the agent loop makes no more model calls and the run ends
 * `budget_exhausted`, parking the session with this reason. A step may be up to
 * FLEET_MODEL_MAX_OUTPUT_CHARS and a run up to maxTurns (1,000) of them: a model that answered
 * 3 MB and a tool call each time grew a session by gigabytes in one run, which every later
 * claim, whole read and model request held in full. Past the bound by at most one step.
 *
 * A step's tool results count too, as each is appended (`resultRoom`): 40 calls to a tool
 * answering 1 MB took one step's history to 40 MB. Each call keeps room for a short answer
 * for every call after it (`CALL_RESERVE`), so that whatever happens every call gets its one
 * result (resume-semantics §3); a result larger than the room left is cut to it with a note
 * saying so (`fitResult`), and a call with no room for that is not run (`NOT_RUN_TEXT`). Only
 * where the step itself took the history past the bound do its calls' short answers pass it.
 * The sum is kept with the history array (growing-fold.ts): each question weighs only the
 * messages appended since.
 */
import { GrowingFold } from "../shared/growing-fold.js";
import type { Message } from "../shared/messages.js";
import { CANCELLED_BEFORE_START_TEXT } from "../shared/resume-plan.js";
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

/** The result of a call the history had no room left to run (success false: it did not run). */
export const NOT_RUN_TEXT =
  "Not run: the session's history is full (the results of this step's tool calls took the room it may hold), so this tool was not started and changed nothing. Continue in a new session.";

/** What each call after the current one may need: its short answer (not run, or cancelled before it started). */
export const CALL_RESERVE = Math.max(
  Buffer.byteLength(NOT_RUN_TEXT, "utf8"),
  Buffer.byteLength(CANCELLED_BEFORE_START_TEXT, "utf8"),
);

/** The note a result cut to the room left ends with. */
function cutNote(kept: number, total: number): string {
  return `\n[cut: the session's history had room for ${kept.toLocaleString("en")} of the tool's ${total.toLocaleString("en")} characters; the rest was not stored. The history is full: continue in a new session.]`;
}

/** The most bytes a cut note takes (its counts as long as a result's may be). */
const CUT_NOTE_MAX = Buffer.byteLength(cutNote(99_999_999, 99_999_999), "utf8");

/** The least room a call is run with: enough to say its result was cut, or that it did not run. */
export const RUN_ROOM = Math.max(CALL_RESERVE, CUT_NOTE_MAX);

/**
 * Bytes the result of a call may take, `after` calls of its step still to answer after it
 * (pure, but for the fold kept with `history`); below 0 when the history is past the bound.
 */
export function resultRoom(
  history: readonly Message[],
  after: number,
  max: number = MAX_HISTORY_BYTES,
): number {
  return max - held.of(history) - after * CALL_RESERVE;
}

/**
 * `content` within `room` bytes (UTF-8, as history-bytes.ts counts a tool result; pure): as it
 * is when it fits, else its start, cut at a character's boundary, and the note saying how much
 * was kept (`room` at least RUN_ROOM).
 */
export function fitResult(content: string, room: number): { content: string; cut: boolean } {
  // The usual result fits: measured without encoding it (a UTF-16 unit is at most 3 bytes of
  // UTF-8), where a copy of its bytes was made for every tool call to be thrown away.
  if (content.length * 3 <= room || Buffer.byteLength(content, "utf8") <= room)
    return { content, cut: false };
  const bytes = Buffer.from(content, "utf8");
  let end = Math.max(0, room - CUT_NOTE_MAX);
  // Back to the first byte of a character: a surrogate pair is one 4-byte sequence in UTF-8.
  while (end > 0 && (bytes[end]! & 0xc0) === 0x80) end--;
  const kept = bytes.subarray(0, end).toString("utf8");
  return { content: `${kept}${cutNote(kept.length, content.length)}`, cut: true };
}

/**
 * Why the run ends after a step whose tool results did not all fit (`budget_exhausted:
 * history: …`): `cut`, whether a result was cut to the room left; `notRun`, the calls not run.
 */
export function stepResultsFull(
  history: readonly Message[],
  step: { cut: boolean; notRun: number },
  max: number = MAX_HISTORY_BYTES,
): string {
  const what = [
    ...(step.cut ? ["a result was cut to the room left"] : []),
    ...(step.notRun > 0 ? [`${step.notRun} of its calls were not run`] : []),
  ].join(" and ");
  return (
    `history: the session's history holds about ${mebibytes(held.of(history))} MiB: the results of the last ` +
    `step's tool calls did not all fit in the ${mebibytes(max)} MiB a session's history may hold (${what}; ` +
    "no model could be sent more): continue in a new session"
  );
}
