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
 * The calls by id, and the answers, of a step that asked for no tool: shared by every walk,
 * never changed (`byId` is only filled while a step's calls are walked, and a shared
 * `answered` is copied before it is added to).
 */
const NO_CALLS = new Map<string, ToolCall>();
const NO_ANSWERS = new Set<string>();

/**
 * The walk that pairs each tool result with a call of the step it follows, one message at a
 * time: a left fold, so a walk extended with more messages ends exactly where a walk of the
 * whole would. It stops at the first structural problem and then keeps it.
 */
export class Pairing {
  /** How many messages the walk has seen. */
  length = 0;
  /** The first structural problem met, if any (later messages do not change it). */
  problem: string | undefined;
  /** The last tool-requesting step's calls by id (linear in the history: see `push`). */
  private pending: ToolCall[] = [];
  private byId = NO_CALLS;
  private answered = NO_ANSWERS;
  /**
   * Whether `answered` is shared with the walk this one was copied from (or with a copy of
   * it): copied before its first change, so that a copy costs nothing until it walks a result.
   */
  private answeredShared = true;
  private stepIndex = -1;

  /** Walks `messages` from index `from` (after the messages already walked). */
  push(messages: readonly Message[], from = 0): this {
    for (let i = from; i < messages.length; i++) {
      const index = this.length++;
      if (this.problem === undefined) this.problem = this.step(messages[i]!, index);
    }
    return this;
  }

  /**
   * A walk that goes on from here without moving this one. Copy-on-write: the worker asks for
   * one at every append (history-tail.ts), and most appends are steps, which replace what a
   * walk holds rather than change it. `pending` and `byId` are only ever replaced, never
   * changed in place, so they are shared as they are; `answered` is copied by whichever walk
   * adds to it first.
   */
  copy(): Pairing {
    const other = new Pairing();
    other.length = this.length;
    other.problem = this.problem;
    other.pending = this.pending;
    other.byId = this.byId;
    other.answered = this.answered;
    other.answeredShared = true;
    this.answeredShared = true;
    other.stepIndex = this.stepIndex;
    return other;
  }

  /** The calls of the last tool-requesting step that still have no result. */
  open(): ToolCall[] {
    return this.pending.filter((c) => !this.answered.has(c.id));
  }

  private step(message: Message, index: number): string | undefined {
    if (message.role === "tool") {
      const call = this.byId.get(message.toolCallId);
      if (!call) return `messages[${index}] answers no call of the step it follows ("${message.toolCallId}")`;
      if (this.answered.has(call.id)) return `messages[${index}] answers call "${call.id}" a second time`;
      if (this.answeredShared) {
        this.answered = new Set(this.answered);
        this.answeredShared = false;
      }
      this.answered.add(call.id);
      return undefined;
    }
    if (this.answered.size < this.byId.size) {
      const open = this.pending.find((c) => !this.answered.has(c.id))!;
      return `tool call "${open.id}" of messages[${this.stepIndex}] has no result, yet messages[${index}] follows`;
    }
    this.pending = message.role === "assistant" && requestsTools(message) ? (message.toolCalls ?? []) : [];
    // A result names its call by id alone: two calls with one id could never both be answered.
    // A step without calls (most) gets the one empty map: it is never changed in place.
    this.byId = this.pending.length === 0 ? NO_CALLS : new Map();
    for (const call of this.pending) {
      if (this.byId.has(call.id)) return `messages[${index}] has two tool calls with the id "${call.id}"`;
      this.byId.set(call.id, call);
    }
    this.answered = this.pending.length === 0 ? NO_ANSWERS : new Set();
    this.answeredShared = this.pending.length === 0;
    this.stepIndex = index;
    return undefined;
  }
}

/** Characters of an unknown stop reason its detail names (a parked reason, a log line, a 409). */
export const MAX_STOP_REASON_DETAIL = 120;

/**
 * An unknown stop reason as a detail: whole up to MAX_STOP_REASON_DETAIL characters, else its
 * start (no surrogate pair cut in two) and its length. Any caller's scripted step, or any
 * provider, may say a stop reason of millions of characters.
 */
export function stopReasonDetail(reason: string): string {
  if (reason.length <= MAX_STOP_REASON_DETAIL) return reason;
  const end = /[\uD800-\uDBFF]/.test(reason[MAX_STOP_REASON_DETAIL - 1]!)
    ? MAX_STOP_REASON_DETAIL - 1
    : MAX_STOP_REASON_DETAIL;
  return `${reason.slice(0, end)}… (${reason.length.toLocaleString("en")} characters)`;
}

function fromStopReason(message: AssistantMessage): ResumePoint {
  const reason = message.stopReason;
  if (!isKnownStopReason(reason))
    return { resumable: false, reason: "unknown_stop", detail: stopReasonDetail(reason) };
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
  return resumePointOf(new Pairing().push(history), history.at(-1));
}

/**
 * `resumePoint` of a history from its pairing walk (`pairing`, over the whole history) and its
 * last message: what a caller that keeps the walk of a growing history asks (history-tail.ts).
 */
export function resumePointOf(pairing: Pairing, last: Message | undefined): ResumePoint {
  if (!last) return { resumable: false, reason: "empty" };
  if (pairing.problem !== undefined) return malformed(pairing.problem);
  const open = pairing.open();
  if (open.length > 0) return { resumable: true, kind: "recover_tools", unansweredToolCalls: open };
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

/** Distinct tool names a recover_tools description names, and the characters of each. */
const MAX_DESCRIBED_TOOLS = 5;
const MAX_DESCRIBED_TOOL_NAME = 64;

/**
 * The calls' distinct names, in call order, for a tooltip: the first MAX_DESCRIBED_TOOLS, each
 * cut at MAX_DESCRIBED_TOOL_NAME characters (no surrogate pair cut in two), then `and N more`.
 * Tool names are model output: a model may invent any name, and one step may ask for 1,000 calls.
 */
function describedNames(calls: readonly ToolCall[]): string {
  const distinct = [...new Set(calls.map((c) => c.name))];
  const named = distinct.slice(0, MAX_DESCRIBED_TOOLS).map((name) => {
    if (name.length <= MAX_DESCRIBED_TOOL_NAME) return name;
    const end = /[\uD800-\uDBFF]/.test(name[MAX_DESCRIBED_TOOL_NAME - 1]!)
      ? MAX_DESCRIBED_TOOL_NAME - 1
      : MAX_DESCRIBED_TOOL_NAME;
    return `${name.slice(0, end)}…`;
  });
  const more = distinct.length - named.length;
  return more > 0 ? `${named.join(", ")} and ${more} more` : named.join(", ");
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
      const names = describedNames(point.unansweredToolCalls);
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
