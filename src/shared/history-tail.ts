/**
 * `resumePoint` and `tailState` of a history that only grows, in time linear in what was
 * appended since the last question rather than in the whole history.
 *
 * The worker asks at the start of each run and at every append (the tail state is stored in
 * the append's statement): with a walk of the whole history each time, a run on a session of
 * 50,000 messages walked them some ten times. The pairing walk is a left fold
 * (resume-point.ts `Pairing`), so the walk of a history is kept with the array and extended
 * by the messages pushed onto it since (growing-fold.ts); the answers are exactly
 * `resumePoint`'s.
 */
import { GrowingFold } from "./growing-fold.js";
import type { Message } from "./messages.js";
import { Pairing, type ResumePoint, resumePointOf } from "./resume-point.js";
import { type TailState, tailStateOf } from "./tail-state.js";

/** The pairing walk of a history as it is now (kept for the next question). */
const walks = new GrowingFold<Message, Pairing>(
  () => new Pairing(),
  (pairing, history, from) => pairing.push(history, from),
);

/** `resumePoint([...history, ...appended])`, without walking `history` again. */
export function resumePointAfter(
  history: readonly Message[],
  appended: readonly Message[] = [],
): ResumePoint {
  const pairing = walks.of(history);
  if (appended.length === 0) return resumePointOf(pairing, history.at(-1));
  return resumePointOf(pairing.copy().push(appended), appended.at(-1));
}

/** `tailState([...history, ...appended])`, without walking `history` again. */
export function tailStateAfter(history: readonly Message[], appended: readonly Message[] = []): TailState {
  return tailStateOf(resumePointAfter(history, appended));
}

/**
 * Whether the messages of a stored history before its tail are known well formed, from the
 * tail state stored with every append (computed from the whole): not `malformed` (a structural
 * problem is kept by every later message, resume-point.ts `Pairing`), and not `empty` when it
 * holds messages (no state was computed). `tailState` null: no session.
 */
export function wellFormedBeforeTail(tailState: string | null, lastSeq: number): boolean {
  return tailState !== null && tailState !== "malformed" && !(tailState === "empty" && lastSeq > 0);
}

/**
 * `resumePoint` of a well-formed history (wellFormedBeforeTail) from its tail alone: `tail`, its
 * messages from its last assistant message on (index `start`), perhaps with more appended. The
 * pairing walk of the whole, without a problem before, holds at that step what a walk that
 * starts there holds, and names the same indexes.
 */
export function resumePointOfTail(tail: readonly Message[], start: number): ResumePoint {
  const pairing = new Pairing();
  pairing.length = start;
  return resumePointOf(pairing.push(tail), tail.at(-1));
}
