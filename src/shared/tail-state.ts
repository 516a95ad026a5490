/**
 * The session's denormalised tail state: a one-word summary of how its history ends, kept
 * on the session row in the same statement as each append so the sweeper can find stuck
 * sessions through an index instead of reading histories.
 */
import type { Message } from "./messages.js";
import { assertNever, type ResumePoint, resumePoint } from "./resume-point.js";

export const TAIL_STATES = [
  "empty",
  "awaiting_model",
  "tools_pending",
  "interrupted",
  "max_output",
  "paused",
  "completed",
  "refused",
  "context_full",
  "unknown_stop",
  "malformed",
] as const;
export type TailState = (typeof TAIL_STATES)[number];

export function tailStateOf(point: ResumePoint): TailState {
  if (!point.resumable) return point.reason;
  switch (point.kind) {
    case "call_model":
      return point.cause === "paused" ? "paused" : "awaiting_model";
    case "recover_tools":
      return "tools_pending";
    case "retry_response":
      return "interrupted";
    case "continue_response":
      return "max_output";
    default:
      return assertNever(point);
  }
}

export function tailState(history: readonly Message[]): TailState {
  return tailStateOf(resumePoint(history));
}
