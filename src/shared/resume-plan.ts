/**
 * What a resume appends before the model is called again (resume-semantics.md §2–§3), and
 * how unanswered tool calls are closed before new input. Pure functions over plain messages.
 */
import { AgentResumeError } from "./errors.js";
import type { InternalMessage, Message, ToolCall, ToolMessage } from "./messages.js";
import { assertNever, type Resumable, type ResumePoint, resumePoint } from "./resume-point.js";

/** The exact result text of a tool call whose process stopped while it ran (spec §3). */
export const INTERRUPTED_TOOL_TEXT =
  "The process stopped while this tool was running, so it may or may not have completed, and whatever it changes may or may not have happened. Check the current state before running it again.";

/** The result of a call that never started because its run was cancelled (agent-loop.ts). */
export const CANCELLED_BEFORE_START_TEXT =
  "Cancelled: the run was stopped before this tool started, so it did not run.";

/** How the failed result of a tool aborted while it ran (a cancel, a worker's shutdown) starts. */
export const CANCELLED_WHILE_RUNNING_PREFIX = "Cancelled while running: ";

/**
 * The failed results the runtime gives a call it refuses without running anything: a tool the
 * agent does not list (contracts.md §12) and arguments the tool's schema rejects. Like the
 * interrupted and cancelled results above, they say nothing ran (automatic-resumes.ts).
 */
export const UNAVAILABLE_TOOL_PREFIX = 'no tool named "';
export const UNAVAILABLE_TOOL_SUFFIX = '" is available to this agent';
export const INVALID_ARGUMENTS_PREFIX = "Invalid arguments: ";

/** The result of a call to a tool its agent does not list. */
export function unavailableToolText(name: string): string {
  return `${UNAVAILABLE_TOOL_PREFIX}${name}${UNAVAILABLE_TOOL_SUFFIX}`;
}

/** Internal message for `retry_response`: the partial response is kept, the model redoes it. */
export const RETRY_RESPONSE_TEXT =
  "Your previous response was cut off by a fault before it was complete. Discard it and redo that response from the beginning.";

/** Internal message for `continue_response`: the response is kept, the model continues it. */
export const CONTINUE_RESPONSE_TEXT =
  "Your previous response reached the output limit and was cut off. Continue exactly where it stopped, without repeating anything you already wrote.";

/** One failed result per call, in call order, with the exact interrupted text. */
export function interruptedResults(calls: readonly ToolCall[]): ToolMessage[] {
  return calls.map((call) => ({
    role: "tool",
    toolCallId: call.id,
    name: call.name,
    content: INTERRUPTED_TOOL_TEXT,
    success: false,
  }));
}

function internal(content: string): InternalMessage {
  return { role: "internal", content };
}

/** What resuming at `point` appends before calling the model. */
export function resumeAppends(point: Resumable): Message[] {
  switch (point.kind) {
    case "call_model":
      return [];
    case "recover_tools":
      return interruptedResults(point.unansweredToolCalls);
    case "retry_response":
      return [internal(RETRY_RESPONSE_TEXT)];
    case "continue_response":
      return [internal(CONTINUE_RESPONSE_TEXT)];
    default:
      return assertNever(point);
  }
}

/**
 * Plans a resume: the point, and what to append. Throws AgentResumeError when there is
 * nothing to resume, like the library's `resume()`.
 */
export function planResume(history: readonly Message[]): { point: Resumable; appends: Message[] } {
  const point: ResumePoint = resumePoint(history);
  if (!point.resumable) throw new AgentResumeError(point.reason, point.detail);
  return { point, appends: resumeAppends(point) };
}

/**
 * What to append before new input (a user message) so that no tool call is left without a
 * result: the same synthetic failed results, for the unanswered calls only. Results that
 * did arrive are kept as they are. Throws AgentResumeError("malformed") for a history whose
 * calls and results do not pair up: new input cannot repair it.
 */
export function closeUnansweredToolCalls(history: readonly Message[]): ToolMessage[] {
  const point = resumePoint(history);
  if (!point.resumable && point.reason === "malformed") throw new AgentResumeError("malformed", point.detail);
  return point.resumable && point.kind === "recover_tools"
    ? interruptedResults(point.unansweredToolCalls)
    : [];
}
