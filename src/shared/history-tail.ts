/**
 * `resumePoint` and `tailState` of a history that only grows, in time linear in what was
 * appended since the last question rather than in the whole history.
 *
 * The worker asks at the start of each run and at every append (the tail state is stored in
 * the append's statement): with a walk of the whole history each time, a run on a session of
 * 50,000 messages walked them some ten times. The pairing walk is a left fold
 * (resume-point.ts `Pairing`), so the walk of a history is kept with the array and extended
 * by the messages pushed onto it since; the answers are exactly `resumePoint`'s.
 *
 * The walk kept is trusted only while the array still holds, at the place the walk stopped,
 * the very message it stopped at (and is no shorter): an array that was cut, or whose end was
 * replaced, is walked again from its start. Arrays of the worker's histories are only ever
 * pushed onto (run-state.ts, agent-loop.ts).
 */
import type { Message } from "./messages.js";
import { Pairing, type ResumePoint, resumePointOf } from "./resume-point.js";
import { type TailState, tailStateOf } from "./tail-state.js";

type Walked = { pairing: Pairing; last: Message | undefined };

const walks = new WeakMap<readonly Message[], Walked>();

/** The pairing walk of `history` as it is now (kept for the next question). */
function walkOf(history: readonly Message[]): Pairing {
  let walked = walks.get(history);
  const at = walked?.pairing.length ?? 0;
  if (!walked || history.length < at || (at > 0 && history[at - 1] !== walked.last)) {
    walked = { pairing: new Pairing(), last: undefined };
    walks.set(history, walked);
  }
  if (walked.pairing.length < history.length) {
    walked.pairing.push(history, walked.pairing.length);
    walked.last = history.at(-1);
  }
  return walked.pairing;
}

/** `resumePoint([...history, ...appended])`, without walking `history` again. */
export function resumePointAfter(
  history: readonly Message[],
  appended: readonly Message[] = [],
): ResumePoint {
  const pairing = walkOf(history);
  if (appended.length === 0) return resumePointOf(pairing, history.at(-1));
  return resumePointOf(pairing.copy().push(appended), appended.at(-1));
}

/** `tailState([...history, ...appended])`, without walking `history` again. */
export function tailStateAfter(history: readonly Message[], appended: readonly Message[] = []): TailState {
  return tailStateOf(resumePointAfter(history, appended));
}
