/**
 * Goal mode's rounds and the pause limit's count (pure), for the agent loop (agent-loop.ts):
 * the rounds and consecutive pauses a run had already, and a goal round's internal message.
 */
import type { Message } from "../shared/messages.js";

/** How a goal round's internal message starts (goalRoundText). */
const GOAL_ROUND = "Goal (round ";

/**
 * The goal rounds the run has had already (pure): the goal-round messages after its input,
 * the history's last user message. Not 0 for a run handed back to wait for capacity and
 * taken up again (contracts §15): `maxRounds` is per run, like `maxTurns`, and counting
 * from 0 again gave each hand-back `maxRounds` more rounds.
 */
export function goalRoundsTaken(history: readonly Message[]): number {
  let rounds = 0;
  for (let i = history.length - 1; i >= 0; i--) {
    const message = history[i]!;
    if (message.role === "user") break;
    if (message.role === "internal" && message.content.startsWith(GOAL_ROUND)) rounds++;
  }
  return rounds;
}

/**
 * The consecutive pauses a handed-back run took before its hand-back (pure): the paused steps
 * the history ends with, at most `steps`, the model steps the run committed (an earlier run's
 * pauses are not this run's: a resume starts its count at 0, as any request does).
 */
export function pausesTaken(history: readonly Message[], steps: number): number {
  let pauses = 0;
  for (let i = history.length - 1; i >= 0 && pauses < steps; i--) {
    const message = history[i]!;
    if (message.role !== "assistant" || message.stopReason !== "paused") break;
    pauses++;
  }
  return pauses;
}

/** What the model answers when the goal of goal mode is met. */
export const GOAL_MET = "GOAL_MET";

/** The internal message of a goal round. */
export function goalRoundText(goal: { text: string }, round: number, maxRounds: number): string {
  return (
    `${GOAL_ROUND}${round} of ${maxRounds}): ${goal.text}\n` +
    `If the goal is met, answer ${GOAL_MET}. Otherwise keep working toward it.`
  );
}
