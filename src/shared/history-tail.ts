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
