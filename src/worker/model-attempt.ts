/**
 * One attempt of a model step (call-model.ts): the provider's stream read into an assistant
 * message, or the error that ended it, with whether output had started, the text so far and
 * the usage the provider reported before it failed. The attempt is cut when the stream is idle
 * (`idleTimeoutMs`), streams too long (`maxStepMs`), or sends more than `maxOutputChars`
 * (text, tool calls and calls still streaming, what the step keeps as its provider state) or
 * more than MAX_TOOL_CALLS_PER_STEP calls.
 */
import {
  type AssistantMessage,
  MAX_TOOL_CALLS_PER_STEP,
  type ToolCall,
  type Usage,
} from "../shared/messages.js";
import type { ModelProvider, ModelRequest } from "./models/provider.js";
import { assistant } from "./step-message.js";

/**
 * What an attempt's timer does when it fires (pure): cut the stream as idle (nothing for
 * `idleMs` since the last event, or since the start), cut it as too long (`maxStepMs` since the
 * start; the idle cut wins a tie, as the idle timer did), or wait `ms` more for the nearer of
 * the two. Times in ms on one monotonic clock.
 */
export function attemptLimitAt(
  startedAt: number,
  lastEventAt: number,
  now: number,
  idleMs: number,
  maxStepMs: number,
): { kind: "idle" } | { kind: "step" } | { kind: "wait"; ms: number } {
  const idleLeft = lastEventAt + idleMs - now;
  const stepLeft = startedAt + maxStepMs - now;
  if (idleLeft <= 0) return { kind: "idle" };
  if (stepLeft <= 0) return { kind: "step" };
  return { kind: "wait", ms: Math.min(idleLeft, stepLeft) };
}

export async function attempt(
  provider: ModelProvider,
  outer: ModelRequest,
  idleTimeoutMs: number,
  maxStepMs: number,
  maxOutputChars: number,
): Promise<
  | { message: AssistantMessage }
  | { error: unknown; outputStarted: boolean; partial: string; reported?: Usage }
> {
  let text = "";
  /** The latest usage the provider reported before the step was whole (a `usage` event). */
  let reported: Usage | undefined;
  const calls: ToolCall[] = [];
  let callChars = 0;
  /** Characters of `progress` since the last tool call (a call not yet whole). */
  let pendingChars = 0;
  /** Characters of `kept` progress: the step's provider state, held until the step is whole. */
  let keptChars = 0;
  let outputStarted = false;
  // One controller, aborted by the caller's signal or by the idle timer. Not
  // AbortSignal.any: Node 20 tracks each such signal with a WeakRef, which V8's young
  // collector keeps alive with everything its listeners hold, so every model call's request
  // and stream were promoted to the old generation.
  const controller = new AbortController();
  let idle: Error | undefined;
  const onOuterAbort = () => controller.abort(outer.signal.reason);
  if (outer.signal.aborted) controller.abort(outer.signal.reason);
  else outer.signal.addEventListener("abort", onOuterAbort, { once: true });
  // One timer for the whole attempt, for both limits, re-armed lazily: a stream event only
  // notes its time, and when the timer fires it either cuts the stream (idle for
  // `idleTimeoutMs`, or streaming for `maxStepMs`) or is set again for whichever limit comes
  // first from there. A timer per event, and then `refresh()` per event beside a second timer
  // for the step's limit, were a timer-list update per event and two timers per attempt.
  const startedAt = performance.now();
  let lastEventAt = startedAt;
  const onTimer = () => {
    const now = performance.now();
    const cut = attemptLimitAt(startedAt, lastEventAt, now, idleTimeoutMs, maxStepMs);
    if (cut.kind === "wait") {
      timer = setTimeout(onTimer, cut.ms);
      return;
    }
    idle = new Error(
      cut.kind === "idle"
        ? `the model sent nothing for ${idleTimeoutMs} ms`
        : `the model's answer did not finish within ${maxStepMs} ms`,
    );
    controller.abort(idle);
  };
  let timer = setTimeout(onTimer, Math.min(idleTimeoutMs, maxStepMs));
  // Bytes without an event (a ping, a keep-alive comment) show the stream alive too.
  const alive = () => {
    lastEventAt = performance.now();
  };
  const request: ModelRequest = { ...outer, signal: controller.signal, alive };
  try {
    for await (const event of provider.stream(request)) {
      lastEventAt = performance.now();
      switch (event.type) {
        case "text":
          outputStarted = true;
          if (text.length + callChars + keptChars + event.delta.length > maxOutputChars) {
            text += event.delta.slice(0, Math.max(0, maxOutputChars - callChars - keptChars - text.length));
            const error = new Error(`the model's answer exceeded ${maxOutputChars} characters`);
            controller.abort(error);
            return { error, outputStarted, partial: text, ...(reported ? { reported } : {}) };
          }
          text += event.delta;
          break;
        case "progress":
          // A call (or thinking) still streaming: alive, and bounded as it arrives, not only
          // once whole. Past the bound it is cut like a call too big (not retried: the same
          // request would stream the same again). What the step keeps as its provider state
          // counts for the whole step: a tool call does not make it forgotten.
          if (event.kept) keptChars += event.chars;
          else pendingChars += event.chars;
          if (text.length + callChars + keptChars + pendingChars > maxOutputChars) {
            outputStarted = true;
            const error = new Error(`the model's answer exceeded ${maxOutputChars} characters`);
            controller.abort(error);
            return { error, outputStarted, partial: text, ...(reported ? { reported } : {}) };
          }
          break;
        case "tool_call": {
          outputStarted = true;
          pendingChars = 0;
          // A call's name and arguments count against the same bound as text: a 30 MB argument
          // would otherwise be stored and handed to a tool. Past it the call is dropped (not
          // run) and the step is interrupted with its text, like a cut stream.
          callChars += event.call.name.length + JSON.stringify(event.call.arguments ?? {}).length;
          if (text.length + callChars + keptChars > maxOutputChars) {
            const error = new Error(
              `the model's answer exceeded ${maxOutputChars} characters (tool call ${event.call.name})`,
            );
            controller.abort(error);
            return { error, outputStarted, partial: text, ...(reported ? { reported } : {}) };
          }
          // So does the number of calls: a step of a million calls would be stored, and each of
          // its results appended after it (contracts §12). Past it the step is cut the same way.
          if (calls.length >= MAX_TOOL_CALLS_PER_STEP) {
            const error = new Error(
              `the model's answer asked for more than ${MAX_TOOL_CALLS_PER_STEP} tool calls in one step`,
            );
            controller.abort(error);
            return { error, outputStarted, partial: text, ...(reported ? { reported } : {}) };
          }
          calls.push(event.call);
          break;
        }
        case "usage":
          reported = event.usage;
          break;
        case "done":
          return { message: assistant(text, calls, event.stopReason, event.usage, event.providerState) };
      }
    }
    return {
      error: new Error("the stream ended before its final event"),
      outputStarted: true,
      partial: text,
      ...(reported ? { reported } : {}),
    };
  } catch (error) {
    return { error: idle ?? error, outputStarted, partial: text, ...(reported ? { reported } : {}) };
  } finally {
    clearTimeout(timer);
    outer.signal.removeEventListener("abort", onOuterAbort);
  }
}
