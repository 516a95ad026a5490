/**
 * The tool registry. A tool gets its arguments, the call id, the session id and an
 * AbortSignal; it returns the result text or throws (the error message becomes a failed
 * result). Register your own with `registry.register(...)` or `fleet worker --tools FILE`.
 */
import type { ZodType } from "zod";
import { ValidationError } from "../../shared/errors.js";
import { toValidationError } from "../../shared/messages.js";
import type { ToolSpec } from "../models/provider.js";

export type ToolContext = { callId: string; sessionId: string; signal: AbortSignal };

export type Tool<A = Record<string, unknown>> = {
  name: string;
  description: string;
  /** JSON Schema sent to the model. */
  parameters: Record<string, unknown>;
  /** Validates the model's arguments before the tool runs (optional). */
  schema?: ZodType<A>;
  run(args: A, context: ToolContext): Promise<string>;
};

/** Helper that keeps a tool's argument type tied to its schema. */
export function defineTool<A>(tool: Tool<A>): Tool {
  return tool as unknown as Tool;
}

export class ToolRegistry {
  private readonly tools = new Map<string, Tool>();

  register(...tools: Tool[]): this {
    for (const tool of tools) {
      if (!/^[A-Za-z0-9_-]{1,64}$/.test(tool.name)) {
        throw new ValidationError("tool.name", `"${tool.name}" must be 1-64 letters, digits, '_' or '-'`);
      }
      this.tools.set(tool.name, tool);
    }
    return this;
  }

  get(name: string): Tool | undefined {
    return this.tools.get(name);
  }

  names(): string[] {
    return [...this.tools.keys()];
  }

  /** The specs of the named tools, for the model; unknown names are reported, not skipped. */
  specs(names: readonly string[]): ToolSpec[] {
    return names.map((name) => {
      const tool = this.tools.get(name);
      if (!tool)
        throw new ValidationError("agent.tools", `no tool named "${name}" is registered in this worker`);
      return { name: tool.name, description: tool.description, parameters: tool.parameters };
    });
  }
}

export type ToolOutcome = { success: boolean; content: string };

/** The result of a call to a tool its agent does not list (contracts.md §12): nothing runs. */
export function unavailableToolText(name: string): string {
  return `no tool named "${name}" is available to this agent`;
}

/**
 * The `tool` label of `fleet_tool_calls_total` for a call: its name if the operator
 * registered it in this worker, else `unregistered` — a model's output never becomes a label.
 */
export function toolLabel(tools: Pick<ToolRegistry, "get">, name: string): string {
  return tools.get(name) ? name : "unregistered";
}

/**
 * Runs one call; never throws: a failure is a failed result the model can read. The caller
 * passes `undefined` for a tool the agent does not list, which runs nothing.
 */
export async function executeTool(
  tool: Tool | undefined,
  name: string,
  args: Record<string, unknown>,
  context: ToolContext,
  abandonAfterMs = ABANDON_AFTER_MS,
): Promise<ToolOutcome> {
  if (!tool) return { success: false, content: unavailableToolText(name) };
  let parsed: unknown = args;
  if (tool.schema) {
    const result = tool.schema.safeParse(args);
    if (!result.success) {
      return { success: false, content: `Invalid arguments: ${toValidationError("", result.error).message}` };
    }
    parsed = result.data;
  }
  try {
    const running = Promise.resolve().then(() => tool.run(parsed as Record<string, unknown>, context));
    const done = await unlessAbandoned(running, context.signal, abandonAfterMs);
    if (done === ABANDONED) {
      return {
        success: false,
        content: `the tool did not stop within ${abandonAfterMs} ms of being asked to; it may still be running, and whatever it changes may or may not happen`,
      };
    }
    return { success: true, content: bounded(resultText(done)) };
  } catch (error) {
    return { success: false, content: bounded(error instanceof Error ? error.message : String(error)) };
  }
}

/** How long a tool may go on after its run asked it to stop (a cancel, a shutdown, a lost lease). */
export const ABANDON_AFTER_MS = 2_000;
const ABANDONED = Symbol("abandoned");

/**
 * What `running` gives, or ABANDONED once `signal` has been aborted for `graceMs` and the
 * tool still has not finished: a tool that ignores its signal (a loop that never looks, a
 * request without a timeout) would otherwise hold its run, its worker slot and a cancel
 * forever. The tool is not stopped — nothing can stop a promise — only no longer waited for.
 */
function unlessAbandoned<T>(
  running: Promise<T>,
  signal: AbortSignal,
  graceMs: number,
): Promise<T | typeof ABANDONED> {
  let timer: NodeJS.Timeout | undefined;
  let onAbort: (() => void) | undefined;
  const abandoned = new Promise<typeof ABANDONED>((resolve) => {
    onAbort = () => {
      timer = setTimeout(() => resolve(ABANDONED), graceMs);
    };
    if (signal.aborted) onAbort();
    else signal.addEventListener("abort", onAbort, { once: true });
  });
  return Promise.race([running, abandoned]).finally(() => {
    clearTimeout(timer);
    if (onAbort) signal.removeEventListener("abort", onAbort);
  });
}

/**
 * The most of one tool result that is stored, as characters (as much as a new message may
 * hold). A tool that returns 100 MB would otherwise take that much of a worker's memory per
 * call, of Postgres per message and of Redis per event, and no model could read it anyway.
 */
export const MAX_TOOL_RESULT_CHARS = 1_000_000;

/** `text`, cut to MAX_TOOL_RESULT_CHARS (never inside a surrogate pair) with a note saying so. */
export function bounded(text: string): string {
  if (text.length <= MAX_TOOL_RESULT_CHARS) return text;
  let end = MAX_TOOL_RESULT_CHARS;
  const last = text.charCodeAt(end - 1);
  if (last >= 0xd800 && last <= 0xdbff) end--;
  return `${text.slice(0, end)}\n[truncated: the tool returned ${text.length.toLocaleString("en")} characters; the first ${end.toLocaleString("en")} are kept]`;
}

/**
 * A tool's result as the text a tool message holds: a user tool typed loosely (plain
 * JavaScript) may return a number, an object or nothing, and the stored message, its
 * MESSAGE event and the console must all see the same string. Nothing a tool returns
 * makes its append fail (contracts §12).
 */
export function resultText(value: unknown): string {
  if (typeof value === "string") return value;
  if (value === undefined || value === null) return "";
  if (typeof value === "object") {
    try {
      return JSON.stringify(value) ?? String(value);
    } catch {
      return String(value);
    }
  }
  return String(value);
}
