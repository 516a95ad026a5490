/**
 * The scripted model (contracts.md §5): a real provider implementation that answers from a
 * script instead of a network, with the same streaming events and stop reasons.
 *
 * The step used is the number of assistant messages already in the history, so a resumed
 * session continues with the right step on any worker; past the last step it repeats the
 * last one. Faults are counted across the fleet through a shared counter (Redis).
 */
import type { ScriptedStep } from "../../shared/agent-config.js";
import type { Message, ToolCall } from "../../shared/messages.js";
import type { ScriptedSettings } from "../../shared/model-endpoints.js";
import { type ModelEvent, type ModelProvider, type ModelRequest, ProviderError } from "./provider.js";

/** Counts attempts at a (session, step) across every worker. */
export type FaultCounter = { increment(key: string): Promise<number> };

export type Sleep = (ms: number, signal: AbortSignal) => Promise<void>;

export const abortableSleep: Sleep = (ms, signal) =>
  new Promise((resolve, reject) => {
    if (signal.aborted) return reject(signal.reason ?? new Error("aborted"));
    const timer = setTimeout(() => {
      signal.removeEventListener("abort", onAbort);
      resolve();
    }, ms);
    const onAbort = () => {
      clearTimeout(timer);
      reject(signal.reason ?? new Error("aborted"));
    };
    signal.addEventListener("abort", onAbort, { once: true });
  });

/**
 * The pauses of one stream, on its request's `signal`: one abort listener for all of them,
 * added at the first pause and removed by `close`, and a timer per pause. `abortableSleep` per
 * pause added and removed a listener each time (five per step of four chunks), and Node's
 * EventTarget does that slowly: a worker running a thousand scripted sessions spent more on
 * those listeners than on the pauses' timers.
 */
class StreamPauses {
  private timer: NodeJS.Timeout | undefined;
  private rejectPause: ((reason: unknown) => void) | undefined;
  private listening = false;
  private readonly onAbort = () => {
    clearTimeout(this.timer);
    this.rejectPause?.(this.reason());
  };

  constructor(private readonly signal: AbortSignal) {}

  wait(ms: number): Promise<void> {
    return new Promise((resolve, reject) => {
      if (this.signal.aborted) return reject(this.reason());
      this.rejectPause = reject;
      this.timer = setTimeout(resolve, ms);
      if (!this.listening) {
        this.listening = true;
        this.signal.addEventListener("abort", this.onAbort, { once: true });
      }
    });
  }

  close(): void {
    clearTimeout(this.timer);
    this.rejectPause = undefined;
    if (this.listening) this.signal.removeEventListener("abort", this.onAbort);
  }

  private reason(): unknown {
    return this.signal.reason ?? new Error("aborted");
  }
}

/** How many pieces a text streams in. */
const CHUNKS = 4;

function splitText(text: string, parts: number): string[] {
  if (text.length === 0) return [];
  const size = Math.ceil(text.length / parts);
  const out: string[] = [];
  for (let i = 0; i < text.length; i += size) out.push(text.slice(i, i + size));
  return out;
}

export function scriptedToolCalls(step: ScriptedStep, stepIndex: number, repeated: boolean): ToolCall[] {
  // Filled by push, not by `.map` (whose arrays change elements kind once V8 inlines it, which
  // threw the optimized `stream` below away: event-writer.ts).
  const calls: ToolCall[] = [];
  const asked = step.toolCalls ?? [];
  for (let i = 0; i < asked.length; i++) {
    const call = asked[i]!;
    calls.push({
      // Ids stay unique within a session even when the last step repeats.
      id: call.id ? (repeated ? `${call.id}_${stepIndex}` : call.id) : `call_${stepIndex}_${i}`,
      name: call.name,
      arguments: call.arguments ?? {},
    });
  }
  return calls;
}

const performanceNow = () => performance.now();

/**
 * Where a request is in the script (pure): `stepIndex`, the assistant messages in the history
 * (the step to answer with), and `response`, those of them not `interrupted` — attempts are
 * counted per response, so the retry of a response a fault cut (its partial kept as an
 * `interrupted` message) is another attempt at that response, and `faultTimes` also ends a
 * `stream_cut` on a repeated last step. One pass over the history, no copy of it: a model call
 * is made for every step, and a session's history may hold 50,000 messages.
 */
export function scriptPosition(history: readonly Message[]): { stepIndex: number; response: number } {
  let stepIndex = 0;
  let response = 0;
  for (let i = 0; i < history.length; i++) {
    const message = history[i]!;
    if (message.role !== "assistant") continue;
    stepIndex++;
    if (message.stopReason !== "interrupted") response++;
  }
  return { stepIndex, response };
}

export class ScriptedModel implements ModelProvider {
  constructor(
    private readonly steps: readonly ScriptedStep[],
    private readonly deps: {
      faults: FaultCounter;
      sleep?: Sleep;
      /** A monotonic clock in ms (default `performance.now`), against which the step's pauses are timed. */
      now?: () => number;
      /**
       * The operator's settings (FLEET_SCRIPTED_MODEL, FLEET_SCRIPTED_MAX_DELAY_MS): they apply to
       * sessions stored before they were set too, which the API no longer checks.
       */
      settings?: ScriptedSettings | undefined;
    },
  ) {}

  async *stream(request: ModelRequest): AsyncIterable<ModelEvent> {
    const injected = this.deps.sleep;
    const pauses = injected ? null : new StreamPauses(request.signal);
    const pause = pauses ? (ms: number) => pauses.wait(ms) : (ms: number) => injected!(ms, request.signal);
    const settings = this.deps.settings;
    try {
      if (settings && !settings.enabled)
        throw new ProviderError(
          "the scripted model is turned off on this fleet (FLEET_SCRIPTED_MODEL=off)",
          false,
        );
      const { stepIndex, response } = scriptPosition(request.history);
      const last = this.steps.length - 1;
      const step = this.steps[Math.min(stepIndex, last)]!;
      const delay = Math.min(step.delayMs ?? 0, settings?.maxDelayMs ?? Infinity);
      // Attempts are counted per response (see `scriptPosition`); the counter is per script step
      // and response: two faulty steps never share one.
      const attemptKey = `${Math.min(stepIndex, last)}:${response}`;
      const faulty = step.fault !== undefined && (await this.faultFires(request.sessionId, attemptKey, step));

      // Each pause ends at its point on the step's own schedule (half the delay before the first
      // chunk, the rest spread over the chunks), as a provider's stream arrives on its own clock:
      // a timer that fires late (a busy event loop) shortens the next pause instead of delaying
      // every later chunk by as much, so a step takes its delayMs and not delayMs plus each
      // pause's lateness (five of them for a step of four chunks).
      const now = this.deps.now ?? performanceNow;
      const began = delay > 0 ? now() : 0;
      const until = (offsetMs: number): Promise<void> | undefined => {
        const ms = began + offsetMs - now();
        if (ms > 0) return pause(ms);
        request.signal.throwIfAborted();
        return undefined;
      };
      if (delay > 0) await until(delay / 2);
      if (faulty && step.fault === "connection") {
        throw new ProviderError("scripted fault: connection refused before any output", true);
      }
      if (faulty && step.fault === "rejected") {
        throw new ProviderError("scripted fault: 401 the provider rejected the request", false, undefined, {
          status: 401,
        });
      }
      const text = step.text ?? "";
      const chunks = splitText(text, CHUNKS);
      const cutAfter =
        faulty && step.fault === "stream_cut" ? Math.max(1, Math.floor(chunks.length / 2)) : Infinity;
      for (let i = 0; i < chunks.length; i++) {
        if (i >= cutAfter) throw new ProviderError("scripted fault: the stream broke", true);
        if (delay > 0) await until(delay / 2 + ((i + 1) * delay) / 2 / chunks.length);
        yield { type: "text", delta: chunks[i]! };
      }
      if (faulty && step.fault === "stream_cut")
        throw new ProviderError("scripted fault: the stream broke", true);
      const calls = scriptedToolCalls(step, stepIndex, stepIndex > last);
      for (let i = 0; i < calls.length; i++) yield { type: "tool_call", call: calls[i]! };
      yield { type: "done", stopReason: step.stopReason ?? (calls.length > 0 ? "tool_use" : "end_turn") };
    } finally {
      pauses?.close();
    }
  }

  private async faultFires(sessionId: string, attemptKey: string, step: ScriptedStep): Promise<boolean> {
    if (step.faultTimes === undefined) return true;
    const attempt = await this.deps.faults.increment(`${sessionId}:${attemptKey}`);
    return attempt <= step.faultTimes;
  }
}
