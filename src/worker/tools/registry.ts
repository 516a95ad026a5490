/**
 * The tool registry. A tool gets its arguments, the call id, the session id and an
 * AbortSignal; it returns the result text or throws (the error message becomes a failed
 * result). Register your own with `registry.register(...)` or `fleet worker --tools FILE`.
 * A call is run by `executeTool` (execute-tool.ts).
 */
import type { ZodType } from "zod";
import { ValidationError } from "../../shared/errors.js";
import { thrownText } from "../../shared/thrown-text.js";
import type { ToolSpec } from "../models/provider.js";
import { isTimeLimit, MAX_TIMER_MS } from "./time-limit.js";

export type ToolContext = {
  /**
   * The model's id for the call, as it sent it: what pairs the call with its result, and not
   * unique — the scripted model names every session's first call `call_0_0`, and providers
   * reuse ids from step to step (`call_0`, `functions.NAME:0`).
   */
  callId: string;
  /**
   * The call's key, unique across the fleet and the same on every read of the history:
   * `SESSION_ID:STEP_SEQ:CALL_ID`, the session, the seq of the assistant step that asked for the
   * call, and its `callId` (a step's calls each have their own id). The key a downstream
   * idempotency key should be.
   */
  callKey: string;
  sessionId: string;
  signal: AbortSignal;
};

/** `callKey` of the call `callId` that the assistant step at `stepSeq` of `sessionId` asked for (pure). */
export function callKeyOf(sessionId: string, stepSeq: number, callId: string): string {
  return `${sessionId}:${stepSeq}:${callId}`;
}

export type Tool<A = Record<string, unknown>> = {
  name: string;
  description: string;
  /** JSON Schema sent to the model. */
  parameters: Record<string, unknown>;
  /** Validates the model's arguments before the tool runs (optional). */
  schema?: ZodType<A>;
  run(args: A, context: ToolContext): Promise<string>;
  /**
   * This tool's time limit in ms, instead of FLEET_TOOL_TIMEOUT_MS (0: none). Past it the
   * call's signal is aborted and the call is answered as a failure (README "Tools").
   */
  timeoutMs?: number;
};

/**
 * What is wrong with a tool's `parameters` for the model providers, or null. Both refuse a
 * tool schema of another type than object (Anthropic: `input_schema.type` "Input should be
 * 'object'"; OpenAI: "schema must be a JSON Schema of 'type: \"object\"'"), so every run of an
 * agent listing it would fail: the worker refuses it at start. No `type` at all (a tool
 * without arguments, `{}`) is completed to `type: "object"` in each provider's request.
 */
export function parametersProblem(parameters: Record<string, unknown>): string | null {
  // `parameters: z.object(…)`, the zod schema put where the JSON Schema goes: its JSON is
  // `{"def": …, "type": "object"}`, which passed every check below, so the worker started and
  // every model was sent a tool without properties, and called it with `{}`.
  if (typeof parameters.safeParse === "function")
    return "parameters is a zod schema, not a JSON Schema: the model would be sent no properties (give z.toJSONSchema(schema) as parameters, and the zod schema as schema)";
  // Sent as JSON in every model request: a circular schema or a BigInt in it started the
  // worker, and then every run of an agent listing the tool failed as its request was built.
  const json = jsonProblem(parameters);
  if (json) return `parameters cannot be sent to a model: they are no JSON (${json})`;
  if (parameters.type !== undefined && parameters.type !== "object")
    return `parameters must be a JSON Schema of type "object", not ${JSON.stringify(parameters.type)} (model providers refuse any other)`;
  // Both providers check the schema itself (OpenAI: "… is not of type 'object'"; Anthropic:
  // "input_schema: JSON schema is invalid"), so each request of an agent listing such a tool
  // was refused: every run of it failed, the worker having started without a word.
  const { properties, required } = parameters;
  if (properties !== undefined && !isSchemaMap(properties))
    return `parameters.properties must be an object of JSON Schemas, one per argument ${REFUSED}`;
  if (required !== undefined && !(Array.isArray(required) && required.every((n) => typeof n === "string")))
    return `parameters.required must be an array of argument names ${REFUSED}`;
  return null;
}

const REFUSED = "(model providers refuse any other)";

/** Whether `value` is an object whose every member is a JSON Schema (an object or a boolean). */
function isSchemaMap(value: unknown): boolean {
  if (!value || typeof value !== "object" || Array.isArray(value)) return false;
  return Object.values(value).every(
    (schema) =>
      typeof schema === "boolean" || (!!schema && typeof schema === "object" && !Array.isArray(schema)),
  );
}

/** Why `value` has no JSON (the first line of JSON.stringify's error), or null. */
function jsonProblem(value: unknown): string | null {
  try {
    JSON.stringify(value);
    return null;
  } catch (error) {
    return thrownText(error).split("\n")[0]!;
  }
}

/** What a tool's name may be (the providers' rule for a function's name). */
export const TOOL_NAME = /^[A-Za-z0-9_-]{1,64}$/;

/** Helper that keeps a tool's argument type tied to its schema. */
export function defineTool<A>(tool: Tool<A>): Tool {
  return tool as unknown as Tool;
}

export class ToolRegistry {
  private readonly tools = new Map<string, Tool>();

  register(...tools: Tool[]): this {
    for (const tool of tools) {
      if (!TOOL_NAME.test(tool.name)) {
        throw new ValidationError("tool.name", `"${tool.name}" must be 1-64 letters, digits, '_' or '-'`);
      }
      const schema = parametersProblem(tool.parameters);
      if (schema) throw new ValidationError("tool.parameters", `tool "${tool.name}": ${schema}`);
      if (tool.timeoutMs !== undefined && !isTimeLimit(tool.timeoutMs)) {
        throw new ValidationError(
          "tool.timeoutMs",
          `tool "${tool.name}": must be a whole number of ms from 0 (no limit) to ${MAX_TIMER_MS}`,
        );
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

/**
 * The `tool` label of `fleet_tool_calls_total` for a call: its name if the operator
 * registered it in this worker, else `unregistered` — a model's output never becomes a label.
 */
export function toolLabel(tools: Pick<ToolRegistry, "get">, name: string): string {
  return tools.get(name) ? name : "unregistered";
}
