/**
 * Running one tool call (`executeTool`): its arguments checked against the tool's schema, its
 * time limit and the grace after its run asked it to stop, and its result as the bounded text
 * a tool message holds. The tools themselves are registered in registry.ts.
 */
import { clippedError } from "../../shared/failure-text.js";
import { toValidationError } from "../../shared/messages.js";
import {
  CANCELLED_BEFORE_START_TEXT,
  INVALID_ARGUMENTS_PREFIX,
  unavailableToolText,
} from "../../shared/resume-plan.js";
import { guardedSignal } from "../hook-signal.js";
import { MAX_TOOL_ARGUMENT_DEPTH, RAW_ARGUMENTS_KEY } from "../models/openai-tool-calls.js";
import type { Tool, ToolContext } from "./registry.js";
import { boundedErrorText, resultContent } from "./result-text.js";
import { toolTimedOutText } from "./time-limit.js";

export type ToolOutcome = {
  success: boolean;
  content: string;
  /** The call passed its time limit; `stoppedInGrace`: its tool settled within the grace after. */
  timedOut?: { stoppedInGrace: boolean };
  /** The run was stopped (a cancel, a shutdown, a lost lease) before the tool started: it did not run. */
  notStarted?: true;
};

/** The answer to a call whose run was stopped before its tool started (spec: a call not yet started). */
const NOT_STARTED: ToolOutcome = { success: false, content: CANCELLED_BEFORE_START_TEXT, notStarted: true };

/** The result of a call to a tool its agent does not list (contracts.md §12): nothing runs. */
export { unavailableToolText } from "../../shared/resume-plan.js";
export { bounded, MAX_TOOL_RESULT_CHARS, resultContent, resultText } from "./result-text.js";

/** What `executeTool` is told besides the call. */
export type ExecuteOptions = {
  /** How long a tool may go on after it was asked to stop (ABANDON_AFTER_MS). */
  abandonAfterMs?: number;
  /** The call's time limit (time-limit.ts `toolTimeLimit`); null or absent: none. */
  timeoutMs?: number | null;
  /**
   * A call answered as timed out whose tool settled only after that answer was given: its
   * result is discarded (never stored: one result per call), and said here.
   */
  onLate?: (late: { success: boolean; lateByMs: number }) => void;
  /**
   * The call was answered while its tool still runs (it ignored its signal past the grace:
   * a time limit, a cancel, a shutdown, a lost lease); `settles` resolves when it ends.
   */
  onAbandoned?: (settles: Promise<void>) => void;
  /**
   * A listener the tool added to its signal threw, or (async) rejected, when the signal was
   * aborted (its clean-up failed): said here, never thrown. Must not throw itself.
   */
  onListenerFailed?: (error: unknown) => void;
  /**
   * The tool starts running: its arguments passed their check and its call was not stopped
   * meanwhile. Never called for a call whose tool does not run (an unlisted tool, arguments
   * refused, a call stopped during the check): its run's TOOL_STARTED (contracts §7). Must not throw.
   */
  onStarted?: () => void;
};

/**
 * Runs one call; never throws: a failure is a failed result the model can read. The caller
 * passes `undefined` for a tool the agent does not list, which runs nothing. A call past its
 * time limit has its signal aborted and, once the tool stopped or `abandonAfterMs` passed,
 * is answered as timed out, whatever the tool gives later.
 */
export async function executeTool(
  tool: Tool | undefined,
  name: string,
  args: Record<string, unknown>,
  context: ToolContext,
  options: ExecuteOptions = {},
): Promise<ToolOutcome> {
  if (!tool) return { success: false, content: unavailableToolText(name) };
  const raw = rawArguments(tool, args);
  if (raw !== null) return { success: false, content: notAnObjectText(raw) };
  // The tool's own copy (also under its schema: what `z.any()` passes on is the same object): the
  // call's arguments are the assistant step's, in the history the next model request is built
  // from and the worker keeps of the session. A tool that "redacted" a field in place, or
  // normalized a path, changed what the model was sent, while Postgres kept the original.
  const own = ownArguments(args);
  const graceMs = options.abandonAfterMs ?? ABANDON_AFTER_MS;
  // The tool's own signal: aborted with its run's, or at its time limit.
  const call = new AbortController();
  // What the tool listens to: a listener of a plain AbortSignal that throws (a clean-up whose
  // temporary file is gone) or rejects is an uncaught exception to Node, and the worker's last
  // resort exited 70 at the tool's time limit, cancel or lost lease, cutting off every run on it.
  // Guarded as hooks' signals are (hook-signal.ts): the failure goes to `onListenerFailed`.
  const signal = guardedSignal<undefined>(call.signal, (error) => options.onListenerFailed?.(error));
  // The arguments are checked within the call's time limit and signal: a schema may check
  // asynchronously (`refine(async …)`), which zod does only in `safeParseAsync`.
  // A tool whose call was stopped (its run's signal, or its time limit) while its arguments were
  // checked does not start: before, it ran once the check was done, its signal already aborted,
  // and the call was answered "Cancelled while running: …" though nothing had run yet.
  let started = false;
  const settled: Promise<Settled> = checkedArguments(tool, own).then(
    (checked): Settled | Promise<Settled> => {
      if (signal.aborted) return { ok: false, notStarted: true };
      if (!checked.ok) return { ok: false, invalid: checked.content };
      started = true;
      options.onStarted?.();
      return Promise.resolve()
        .then(() => tool.run(checked.data as Record<string, unknown>, { ...context, signal }))
        .then(
          (value): Settled => ({ ok: true, value }),
          (error: unknown): Settled => ({ ok: false, error }),
        );
    },
  );
  const waiting = firstOf(settled, context.signal, call, graceMs, options.timeoutMs ?? null);
  try {
    const first = await waiting.first;
    if (first === TIMED_OUT) return await timedOut(settled, call, options.timeoutMs!, graceMs, options);
    if (first === ABANDONED && !started) return NOT_STARTED;
    if (first === ABANDONED) {
      options.onAbandoned?.(settled.then(() => {}));
      return {
        success: false,
        content: `the tool did not stop within ${graceMs} ms of being asked to; it may still be running, and whatever it changes may or may not happen`,
      };
    }
    return outcomeOf(first);
  } finally {
    waiting.stop();
  }
}

/**
 * The text of arguments the model sent that are not one JSON object (kept by the providers as
 * `{ "_raw": text }`: models/openai-tool-calls.ts, anthropic-tool-input.ts), or null. A tool
 * that declares a `_raw` parameter itself gets such an object as before. Before, a tool without
 * a `schema` ran with `{ "_raw": … }` as its arguments (every field it reads undefined), and one
 * with a schema answered that a field was missing, not that the JSON was broken.
 */
function rawArguments(tool: Tool, args: Record<string, unknown>): string | null {
  if (args === null || typeof args !== "object") return null;
  const keys = Object.keys(args);
  if (keys.length !== 1 || keys[0] !== RAW_ARGUMENTS_KEY) return null;
  const text = args[RAW_ARGUMENTS_KEY];
  if (typeof text !== "string") return null;
  const declared = (tool.parameters as { properties?: Record<string, unknown> }).properties;
  return declared && typeof declared === "object" && Object.hasOwn(declared, RAW_ARGUMENTS_KEY) ? null : text;
}

/** A deep copy of a call's arguments (JSON data), or the arguments themselves if they cannot be copied. */
function ownArguments(args: Record<string, unknown>): Record<string, unknown> {
  try {
    return structuredClone(args);
  } catch {
    return args;
  }
}

/** The answer to arguments that are not one JSON object (the tool does not run). */
export function notAnObjectText(raw: string): string {
  return `${INVALID_ARGUMENTS_PREFIX}they must be one JSON object (nested at most ${MAX_TOOL_ARGUMENT_DEPTH} levels); the model sent: ${clippedError(raw)}`;
}

/**
 * How a call's tool ended (`invalid`: its arguments were refused, the tool did not run;
 * `notStarted`: the call was stopped before its tool started).
 */
type Settled =
  | { ok: true; value: unknown }
  | { ok: false; error: unknown }
  | { ok: false; invalid: string }
  | { ok: false; notStarted: true };

/**
 * The arguments `tool` runs with: its schema's data (parsed as zod does, `safeParseAsync` when
 * the schema has it, so an async refine or transform is awaited; before, the synchronous parse
 * threw "Encountered Promise during synchronous parse" and every call of such a tool was refused),
 * or the answer that refuses them. Never rejects.
 */
async function checkedArguments(
  tool: Tool,
  args: Record<string, unknown>,
): Promise<{ ok: true; data: unknown } | { ok: false; content: string }> {
  const schema = tool.schema;
  if (!schema) return { ok: true, data: args };
  try {
    const result =
      typeof schema.safeParseAsync === "function"
        ? await schema.safeParseAsync(args)
        : schema.safeParse(args);
    if (!result.success)
      return {
        ok: false,
        content: `${INVALID_ARGUMENTS_PREFIX}${toValidationError("", result.error, null).message}`,
      };
    return { ok: true, data: result.data };
  } catch (error) {
    // A schema whose transform or refine throws (a bug in the tool), or a refusal that cannot be
    // read: the tool does not run, and the model reads why, as for arguments the schema refuses.
    return { ok: false, content: boundedErrorText(error, { prefix: INVALID_ARGUMENTS_PREFIX }) };
  }
}

function outcomeOf(settled: Settled): ToolOutcome {
  if (settled.ok) return { success: true, content: resultContent(settled.value) };
  if ("invalid" in settled) return { success: false, content: settled.invalid };
  if ("notStarted" in settled) return NOT_STARTED;
  // Whatever the tool threw (a string, a plain object, one without a string form): never a throw here.
  return { success: false, content: boundedErrorText(settled.error) };
}

/**
 * A call past its limit: its signal is aborted, the tool gets `graceMs` to stop (so one that
 * honours its signal has stopped before the run goes on), and the call is answered as timed
 * out. A result that comes after that answer is discarded and reported to `onLate`.
 */
async function timedOut(
  settled: Promise<Settled>,
  call: AbortController,
  limitMs: number,
  graceMs: number,
  { onLate, onAbandoned }: Pick<ExecuteOptions, "onLate" | "onAbandoned">,
): Promise<ToolOutcome> {
  call.abort(new Error(toolTimedOutText(limitMs)));
  let grace: NodeJS.Timeout | undefined;
  const stopped = await Promise.race([
    settled.then(() => true),
    new Promise<false>((resolve) => {
      grace = setTimeout(() => resolve(false), graceMs);
    }),
  ]);
  clearTimeout(grace);
  if (!stopped) onAbandoned?.(settled.then(() => {}));
  if (!stopped && onLate) {
    const answeredAt = performance.now();
    void settled.then((late) =>
      onLate({ success: late.ok, lateByMs: Math.round(performance.now() - answeredAt) }),
    );
  }
  return { success: false, content: toolTimedOutText(limitMs), timedOut: { stoppedInGrace: stopped } };
}

/** How long a tool may go on after its run asked it to stop (a cancel, a shutdown, a lost lease). */
export const ABANDON_AFTER_MS = 2_000;
const ABANDONED = Symbol("abandoned");
const TIMED_OUT = Symbol("timed out");

/**
 * What a call waits for: the tool's result, TIMED_OUT at `limitMs` (null, or not above 0:
 * never), or ABANDONED once the run's `signal` has been aborted for `graceMs` and the tool
 * still has not finished — a tool that ignores its signal (a loop that never looks, a request
 * without a timeout) would otherwise hold its run, its worker slot and a cancel forever. The
 * tool is not stopped — nothing can stop a promise — only no longer waited for. An abort of
 * the run's signal is passed on to the tool's (`call`) until `stop`, which also clears the
 * timers. One promise, one listener and at most two timers per call (a race of three
 * promises, two listeners and a promise that never settled when there was no limit, before).
 */
function firstOf(
  settled: Promise<Settled>,
  signal: AbortSignal,
  call: AbortController,
  graceMs: number,
  limitMs: number | null,
): { first: Promise<Settled | typeof ABANDONED | typeof TIMED_OUT>; stop: () => void } {
  let decided = false;
  let limit: NodeJS.Timeout | undefined;
  let grace: NodeJS.Timeout | undefined;
  let resolveFirst!: (first: Settled | typeof ABANDONED | typeof TIMED_OUT) => void;
  const first = new Promise<Settled | typeof ABANDONED | typeof TIMED_OUT>((resolve) => {
    resolveFirst = resolve;
  });
  const decide = (outcome: Settled | typeof ABANDONED | typeof TIMED_OUT) => {
    if (decided) return;
    decided = true;
    clearTimeout(limit);
    clearTimeout(grace);
    resolveFirst(outcome);
  };
  const onAbort = () => {
    call.abort(signal.reason);
    if (!decided) grace = setTimeout(() => decide(ABANDONED), graceMs);
  };
  if (signal.aborted) onAbort();
  else signal.addEventListener("abort", onAbort, { once: true });
  void settled.then(decide);
  if (limitMs !== null && limitMs > 0 && !decided) limit = setTimeout(() => decide(TIMED_OUT), limitMs);
  return {
    first,
    stop: () => {
      decided = true;
      clearTimeout(limit);
      clearTimeout(grace);
      signal.removeEventListener("abort", onAbort);
    },
  };
}
