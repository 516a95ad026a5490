/**
 * What a worker job tells of a run as it goes: its events (contracts §7: RUN_STARTED, the
 * committed messages, TOOL_STARTED / TOOL_FINISHED, MODEL_STOPPED, text deltas) and the
 * extensions' hooks (contracts §8), around the agent loop (process-run.ts).
 */
import type { RunRow } from "../shared/db/schema.js";
import type { SessionEventInput } from "../shared/events.js";
import type { StoredMessage } from "../shared/messages.js";
import type { SessionEventLog } from "../shared/session-event-log.js";
import type { SessionQueries } from "../shared/store/session-queries.js";
import type { RunContext } from "./extensions.js";
import type { Extensions } from "./hook-runner.js";
import { frozenCopy } from "./hook-views.js";
import type { LoopObserver } from "./loop-types.js";
import { passThrough } from "./models/pass-through.js";
import type { ModelEvent, ModelProvider, ModelRequest } from "./models/provider.js";

/**
 * `writes` whose appends tell `events` the session's `sessionEvents` as they read it, so that
 * a stream turned on or off while the job runs follows from its next append on.
 */
export function followingEventsSetting<W extends object>(
  writes: W,
  events: Pick<SessionEventLog, "setOn">,
): W {
  // A proxy, as guardedWrites is: the writes may be a class's instance, whose methods a spread would lose.
  // One function per method, made at its first use (not one closure per call).
  const made = new Map<PropertyKey, { of: (...args: unknown[]) => unknown; following: unknown }>();
  return new Proxy(writes, {
    get(target, property, receiver) {
      const value: unknown = Reflect.get(target, property, receiver);
      if (typeof value !== "function" || (property !== "appendStep" && property !== "appendAndEndRun"))
        return value;
      const kept = made.get(property);
      if (kept?.of === value) return kept.following;
      const method = value as (...args: unknown[]) => unknown;
      const following = async (...args: unknown[]) => {
        const answer = (await method.apply(target, args)) as { sessionEvents?: boolean };
        if (answer.sessionEvents !== undefined) events.setOn(answer.sessionEvents);
        return answer;
      };
      made.set(property, { of: method, following });
      return following;
    },
  });
}

export function runStartedEvent(
  run: RunRow,
  kind: "run" | "resume",
  resumeKind: string | null,
): SessionEventInput {
  return { type: "RUN_STARTED", runId: run.id, kind, resumeKind, trigger: run.trigger };
}

/** The context extensions' hooks get (contracts §8); the session's metadata is read once. */
export async function runContext(
  run: RunRow,
  kind: "run" | "resume",
  resumeKind: string | null,
  history: readonly StoredMessage[],
  agent: unknown,
  signal: AbortSignal,
  deps: { queries: Partial<Pick<SessionQueries, "getSession">> },
): Promise<RunContext> {
  const session = await deps.queries.getSession?.(run.sessionId);
  // Copies, frozen (hook-views.ts): a hook cannot change what the model is sent or which agent
  // runs. The history is copied when a hook first reads it (most never do).
  const before = history.slice();
  let copy: readonly StoredMessage[] | undefined;
  const ctx = {
    sessionId: run.sessionId,
    runId: run.id,
    kind,
    resumeKind,
    trigger: run.trigger,
    agent: frozenCopy(agent),
    metadata: frozenCopy(session?.metadata ?? {}),
    signal,
    inputMessage: kind === "run" ? run.input : null,
  };
  Object.defineProperty(ctx, "history", { enumerable: true, get: () => (copy ??= frozenCopy(before)) });
  return Object.freeze(ctx as RunContext);
}

/** `TOOL_FINISHED` for a committed tool result. */
export function toolFinishedEvent(
  runId: string,
  message: StoredMessage & { role: "tool" },
): SessionEventInput {
  return {
    type: "TOOL_FINISHED",
    runId,
    toolCallId: message.toolCallId,
    name: message.name,
    success: message.success,
  };
}

/** Events and extensions told of what the agent loop commits and starts. */
export function loopObserver(
  runId: string,
  events: SessionEventLog | null,
  runBySeq: Map<number, string>,
  ctx: RunContext | null,
  extensions: Extensions | null,
): LoopObserver {
  // A commit with no event of its own is written with whatever this job writes next — the
  // TOOL_STARTED that follows an assistant step, a run's RUN_COMPLETED — when that comes
  // within the same turn of the event loop (one Redis call instead of two); else on its own.
  let flushScheduled = false;
  const flushSoon = () => {
    if (flushScheduled || !events) return;
    flushScheduled = true;
    setImmediate(() => {
      flushScheduled = false;
      void events.emit();
    });
  };
  return {
    awaitsHooks: ctx !== null,
    async committed(message) {
      runBySeq.set(message.seq, runId);
      const extra: SessionEventInput[] = [];
      if (
        message.role === "assistant" &&
        message.stopReason !== "end_turn" &&
        message.stopReason !== "tool_use"
      )
        extra.push({ type: "MODEL_STOPPED", runId, stopReason: message.stopReason });
      // Every committed result, also one this run did not start (contracts §7: "its result is
      // committed"): a call interrupted by a crash and answered by the resume, a call answered
      // as cancelled, so a reader never sees a TOOL_STARTED left open.
      if (message.role === "tool") extra.push(toolFinishedEvent(runId, message));
      // Not awaited: the log writes in order, after this commit; the run's end waits for it.
      if (extra.length > 0) void events?.emit(extra);
      else flushSoon();
      if (ctx) await extensions!.onCommitted(ctx, { runId, seq: message.seq, message });
    },
    toolStarted(call) {
      void events?.emit([{ type: "TOOL_STARTED", runId, toolCallId: call.id, name: call.name }]);
    },
  };
}

/** `model`, with its text deltas written as MESSAGE_DELTA events (best effort). */
export function withDeltas(
  model: ModelProvider,
  events: SessionEventLog | null,
  runId: string,
): ModelProvider {
  if (!events?.enabled) return model;
  return new DeltaEvents(model, events, runId);
}

/**
 * A class rather than a literal with its own `stream`, for one method for all runs; its stream
 * passes each event on as it comes (models/pass-through.ts: no generator layer per run).
 */
class DeltaEvents implements ModelProvider {
  declare identity?: ModelProvider["identity"];
  constructor(
    private readonly model: ModelProvider,
    private readonly events: SessionEventLog,
    private readonly runId: string,
  ) {
    if (model.identity !== undefined) this.identity = model.identity;
  }

  stream(request: ModelRequest): AsyncIterable<ModelEvent> {
    return passThrough(() => this.model.stream(request), {
      onEvent: (event) => {
        if (event.type === "text") this.events.delta(this.runId, event.delta);
      },
    });
  }
}
