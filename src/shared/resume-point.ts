/**
 * `resumePoint(history)`: which kind of resume applies (resume-semantics.md §2).
 *
 * Pure: reads plain messages, returns a plain value, never throws on a valid history and
 * never mutates it. The decision rests on the last message, after a structural check that
 * every tool result answers exactly one call of the assistant step it follows.
 */
import type { AssistantMessage, Message, ToolCall } from "./messages.js";
import type { NotResumableReason, RefusalReason, ResumeKind } from "./resume-reasons.js";
import { isKnownStopReason, isNormalStop, type StopReason } from "./stop-reasons.js";

export {
  NOT_RESUMABLE_REASONS,
  type NotResumableReason,
  RESUME_KINDS,
  type ResumeKind,
} from "./resume-reasons.js";

/** Why a `call_model` point arose; it decides the session's tail state. */
export type CallModelCause = "awaiting_answer" | "tools_answered" | "paused";

export type ResumePoint =
  | { resumable: true; kind: "call_model"; cause: CallModelCause; unansweredToolCalls: [] }
  | { resumable: true; kind: "recover_tools"; unansweredToolCalls: ToolCall[] }
  | { resumable: true; kind: "retry_response"; unansweredToolCalls: [] }
  | { resumable: true; kind: "continue_response"; unansweredToolCalls: [] }
  | { resumable: false; reason: NotResumableReason; detail?: string };

export type Resumable = Extract<ResumePoint, { resumable: true }>;

/** The JSON of contracts.md §2 (plus `detail` for `malformed`, an additive extension). */
export type ResumePointJson =
  | { resumable: true; kind: ResumeKind; description: string; unansweredToolCalls: ToolCall[] }
  | { resumable: false; reason: RefusalReason; detail?: string };

/**
 * Tool calls are only executed when the step stopped normally. A response cut by a fault,
 * the output limit or a refusal may carry half-formed calls; they were never run and are
 * not owed a result.
 */
export function requestsTools(message: AssistantMessage): boolean {
  return (message.toolCalls?.length ?? 0) > 0 && isNormalStop(message.stopReason);
}

function malformed(detail: string): ResumePoint {
  return { resumable: false, reason: "malformed", detail };
}

/**
 * Walks the history once and returns either a structural problem or the calls of the last
 * tool-requesting step that still have no result.
 */
function pairResults(history: readonly Message[]): { problem: string } | { open: ToolCall[] } {
  // In time linear in the history (the worker classifies it at every append): the pending
  // step's calls by id, and the ids answered.
  let pending: ToolCall[] = [];
  let byId = new Map<string, ToolCall>();
  let answered = new Set<string>();
  let stepIndex = -1;
  for (const [index, message] of history.entries()) {
    if (message.role === "tool") {
      const call = byId.get(message.toolCallId);
      if (!call)
        return {
          problem: `messages[${index}] answers no call of the step it follows ("${message.toolCallId}")`,
        };
      if (answered.has(call.id))
        return { problem: `messages[${index}] answers call "${call.id}" a second time` };
      answered.add(call.id);
      continue;
    }
    if (answered.size < byId.size) {
      const open = pending.find((c) => !answered.has(c.id))!;
      return {
        problem: `tool call "${open.id}" of messages[${stepIndex}] has no result, yet messages[${index}] follows`,
      };
    }
    pending = message.role === "assistant" && requestsTools(message) ? (message.toolCalls ?? []) : [];
    // A result names its call by id alone: two calls with one id could never both be answered.
    byId = new Map();
    for (const call of pending) {
      if (byId.has(call.id))
        return { problem: `messages[${index}] has two tool calls with the id "${call.id}"` };
      byId.set(call.id, call);
    }
    answered = new Set();
    stepIndex = index;
  }
  return { open: pending.filter((c) => !answered.has(c.id)) };
}

function fromStopReason(message: AssistantMessage): ResumePoint {
  const reason = message.stopReason;
  if (!isKnownStopReason(reason)) return { resumable: false, reason: "unknown_stop", detail: reason };
  const known: StopReason = reason;
  switch (known) {
    case "end_turn":
    case "tool_use":
      return { resumable: false, reason: "completed" };
    case "paused":
      return { resumable: true, kind: "call_model", cause: "paused", unansweredToolCalls: [] };
    case "interrupted":
      return { resumable: true, kind: "retry_response", unansweredToolCalls: [] };
    case "max_output":
      return { resumable: true, kind: "continue_response", unansweredToolCalls: [] };
    case "refusal":
      return { resumable: false, reason: "refused" };
    case "context_full":
      return { resumable: false, reason: "context_full" };
    default:
      return assertNever(known);
  }
}

export function resumePoint(history: readonly Message[]): ResumePoint {
  const last = history.at(-1);
  if (!last) return { resumable: false, reason: "empty" };
  const pairing = pairResults(history);
  if ("problem" in pairing) return malformed(pairing.problem);
  if (pairing.open.length > 0)
    return { resumable: true, kind: "recover_tools", unansweredToolCalls: pairing.open };
  switch (last.role) {
    case "user":
    case "internal":
      return { resumable: true, kind: "call_model", cause: "awaiting_answer", unansweredToolCalls: [] };
    case "tool":
      return { resumable: true, kind: "call_model", cause: "tools_answered", unansweredToolCalls: [] };
    case "assistant":
      return fromStopReason(last);
    default:
      return assertNever(last);
  }
}

/** A sentence fit for a tooltip on a "Resume" button. */
export function describeResumePoint(point: Resumable): string {
  switch (point.kind) {
    case "call_model":
      switch (point.cause) {
        case "awaiting_answer":
          return "The model never answered the last message. Resuming calls the model again; nothing is added.";
        case "tools_answered":
          return "All tools finished, then the next model call did not happen. Resuming calls the model with their results.";
        case "paused":
          return "The provider paused the response and the pause limit was reached. Resuming calls the model again.";
        default:
          return assertNever(point.cause);
      }
    case "recover_tools": {
      const n = point.unansweredToolCalls.length;
      const names = point.unansweredToolCalls.map((c) => c.name).join(", ");
      return `The process stopped while ${n} tool call${n === 1 ? " was" : "s were"} running (${names}). Resuming tells the model ${n === 1 ? "it was" : "they were"} interrupted instead of running ${n === 1 ? "it" : "them"} again, then calls the model.`;
    }
    case "retry_response":
      return "A fault cut the model's response. Resuming keeps the partial response and asks the model to redo it from the beginning.";
    case "continue_response":
      return "The response hit the output limit. Resuming keeps it and asks the model to continue exactly where it stopped.";
    default:
      return assertNever(point);
  }
}

export function toResumePointJson(point: ResumePoint): ResumePointJson {
  if (!point.resumable) {
    return point.detail === undefined
      ? { resumable: false, reason: point.reason }
      : { resumable: false, reason: point.reason, detail: point.detail };
  }
  return {
    resumable: true,
    kind: point.kind,
    description: describeResumePoint(point),
    unansweredToolCalls: point.unansweredToolCalls,
  };
}

export function assertNever(value: never): never {
  throw new Error(`unhandled case: ${JSON.stringify(value)}`);
}
