/**
 * What is wrong with the tools and extensions a worker is given, in words, before it starts:
 * `startWorker(config, { tools, extensions })` from code and `fleet worker --tools FILE
 * --extensions FILE` alike (commands/plugin-modules.ts loads the modules, commands/serve.ts
 * then starts the worker). Pure: no I/O. Found only later, each of these was silent or late: a
 * hook named `onMesage` was never called, a second tool of one name replaced the first, a hook
 * that is no function threw at its first run, a `parameters` that is no object failed each run
 * of an agent listing the tool.
 */
import { ValidationError } from "../shared/errors.js";
import { thrownText } from "../shared/thrown-text.js";
import { BUILTIN_TOOL_NAMES } from "../shared/tool-names.js";
import { TRANSCRIPT_EXTENSION } from "./extensions.js";
import { parametersProblem, TOOL_NAME } from "./tools/registry.js";
import { isTimeLimit, MAX_TIMER_MS } from "./tools/time-limit.js";

/** The hooks an extension may have (contracts §8; extensions.ts `Extension`). */
export const HOOK_NAMES = [
  "beforeRun",
  "onMessage",
  "afterRun",
  "onError",
  "onCommitted",
  "onSessionDeleted",
] as const;

/**
 * What makes `tool` (item `i` of a list) no tool (registry.ts `Tool`), or null when it is one.
 * Also what `ToolRegistry.register` refuses (name, time limit), so nothing is found after start.
 */
export function toolProblem(tool: unknown, i: number): string | null {
  return readable(() => toolShapeProblem(tool, i), `tool ${i}`);
}

/**
 * `check()`, or what a getter of the object checked threw (plain JavaScript may define one):
 * before, its message alone reached the operator, naming neither the module nor the item.
 */
function readable(check: () => string | null, item: string): string | null {
  try {
    return check();
  } catch (error) {
    return `${item} cannot be read: ${thrownText(error)}`;
  }
}

/**
 * What a function given as item `i` (a factory or a class: `export default () => ({ ... })`)
 * is said to be, or null for anything else: it was said to have no name, or to be no object,
 * though it was named and what it makes may have been right.
 */
function functionProblem(value: unknown, item: string, made: string): string | null {
  if (typeof value !== "function") return null;
  const name = value.name && value.name !== "default" ? ` (${value.name})` : "";
  return `${item} is a function${name}, not ${made} itself, not a function or class that makes one`;
}

/**
 * Whether `fn` is a generator function (`*run`, `async *afterRun`): calling one runs none of its
 * body, only makes a generator object, so such a hook never did anything, and such a tool's call
 * was answered "{}" (the object, as JSON) as a success.
 */
function isGenerator(fn: unknown): boolean {
  const tag = Object.prototype.toString.call(fn);
  return tag === "[object GeneratorFunction]" || tag === "[object AsyncGeneratorFunction]";
}

const GENERATOR_WORDS =
  "is a generator function, whose body a call does not run; make it a function (async or not)";

function toolShapeProblem(tool: unknown, i: number): string | null {
  const fn = functionProblem(
    tool,
    `tool ${i}`,
    "a tool object: export default defineTool({ name, description, parameters, run })",
  );
  if (fn) return fn;
  if (!tool || typeof tool !== "object")
    return `tool ${i} is not a tool object (defineTool({ name, description, parameters, run }))`;
  const t = tool as Record<string, unknown>;
  if (typeof t.name !== "string" || t.name === "") return `tool ${i} has no name`;
  const name = JSON.stringify(t.name);
  if (!TOOL_NAME.test(t.name)) return `tool ${name}: the name must be 1-64 letters, digits, '_' or '-'`;
  if (typeof t.run !== "function") return `tool ${name}: run is not a function`;
  if (isGenerator(t.run)) return `tool ${name}: run ${GENERATOR_WORDS} that returns the result`;
  if (typeof t.description !== "string") return `tool ${name}: description is not a string`;
  if (!t.parameters || typeof t.parameters !== "object" || Array.isArray(t.parameters))
    return `tool ${name}: parameters is not an object (a JSON Schema)`;
  const schema = parametersProblem(t.parameters as Record<string, unknown>);
  if (schema) return `tool ${name}: ${schema}`;
  // A JSON Schema put here (it belongs in `parameters`): every call failed without running.
  if (t.schema !== undefined && typeof (t.schema as { safeParse?: unknown } | null)?.safeParse !== "function")
    return `tool ${name}: schema has no safeParse: it must be a zod schema (z.object({ ... })) or left out`;
  if (t.timeoutMs !== undefined && !isTimeLimit(t.timeoutMs))
    return `tool ${name}: timeoutMs must be a whole number of ms from 0 (no limit) to ${MAX_TIMER_MS}`;
  return null;
}

/** What makes `extension` (item `i` of a list) no extension (extensions.ts), or null. */
export function extensionProblem(extension: unknown, i: number): string | null {
  return readable(() => extensionShapeProblem(extension, i), `extension ${i}`);
}

function extensionShapeProblem(extension: unknown, i: number): string | null {
  const fn = functionProblem(
    extension,
    `extension ${i}`,
    "an extension object: export default defineExtension({ name, ... })",
  );
  if (fn) return fn;
  const e = extension as Record<string, unknown> | null;
  if (!e || typeof e !== "object" || typeof e.name !== "string" || e.name === "")
    return `extension ${i} has no name`;
  const name = `extension ${JSON.stringify(e.name)}`;
  for (const hook of HOOK_NAMES) {
    if (e[hook] !== undefined && typeof e[hook] !== "function") return `${name}: ${hook} is not a function`;
    if (isGenerator(e[hook])) return `${name}: ${hook} ${GENERATOR_WORDS}`;
  }
  for (const key of Object.keys(e)) {
    if (key === "name" || (HOOK_NAMES as readonly string[]).includes(key)) continue;
    // A hook's name written in another case (`afterrun`) would never be called.
    const meant = HOOK_NAMES.find((hook) => hook.toLowerCase() === key.toLowerCase());
    if (meant) return `${name}: ${key} is no hook; ${meant}?`;
    // Nor would a misspelt one (`onMesage`). Data an extension keeps (not a function) may stay.
    if (typeof e[key] === "function")
      return `${name}: ${key} is no hook (the hooks: ${HOOK_NAMES.join(", ")})`;
  }
  return null;
}

/** A problem of `startWorker`'s options: the option it is in, and what it is. */
export type OptionsProblem = { field: "tools" | "extensions"; message: string };

/**
 * The first problem of the tools and extensions a worker is given, or null: each one's own
 * (above), a tool name given twice or a built-in's (`builtins`): the later tool replaced
 * the earlier silently; or an extension name given twice or a built-in extension's
 * (`builtinExtensions`, the transcript when FLEET_TRANSCRIPT_DIR is set): every hook of a
 * module given twice ran twice, and the logs and `FleetHookFailures` named both alike.
 */
export function workerOptionsProblem(
  options: { tools?: unknown; extensions?: unknown },
  builtins: readonly string[] = BUILTIN_TOOL_NAMES,
  builtinExtensions: readonly string[] = [],
): OptionsProblem | null {
  const tools = options.tools ?? [];
  if (!Array.isArray(tools)) return { field: "tools", message: "is not an array of tools" };
  const toolNames = new Set<string>(builtins);
  for (const [i, tool] of tools.entries()) {
    const message = toolProblem(tool, i);
    if (message) return { field: "tools", message };
    const name = (tool as { name: string }).name;
    if (toolNames.has(name))
      return {
        field: "tools",
        message: builtins.includes(name)
          ? `tool ${JSON.stringify(name)}: a built-in tool has this name (${builtins.join(", ")})`
          : `tool ${JSON.stringify(name)}: two tools have this name`,
      };
    toolNames.add(name);
  }
  const extensions = options.extensions ?? [];
  if (!Array.isArray(extensions)) return { field: "extensions", message: "is not an array of extensions" };
  const extensionNames = new Set<string>(builtinExtensions);
  for (const [i, extension] of extensions.entries()) {
    const message = extensionProblem(extension, i);
    if (message) return { field: "extensions", message };
    const name = (extension as { name: string }).name;
    if (extensionNames.has(name))
      return {
        field: "extensions",
        message: builtinExtensions.includes(name)
          ? `extension ${JSON.stringify(name)}: the built-in ${name} extension has this name (${builtinExtensionCause(name)})`
          : `extension ${JSON.stringify(name)}: two extensions have this name`,
      };
    extensionNames.add(name);
  }
  return null;
}

/** Why a built-in extension is loaded (pure): what an operator may change to free its name. */
function builtinExtensionCause(name: string): string {
  return name === TRANSCRIPT_EXTENSION ? "FLEET_TRANSCRIPT_DIR is set" : "it is always loaded";
}

/** The built-in extensions a worker loads besides the ones it is given. */
export function builtinExtensionNames(config: { transcriptDir?: string | undefined }): string[] {
  return config.transcriptDir ? [TRANSCRIPT_EXTENSION] : [];
}

/**
 * Throws a ValidationError naming the option (`field`: `options.tools` from code, `--tools`
 * from the CLI) and the first problem of `options`, if it has one; `config` says which
 * built-in extensions the worker loads.
 */
export function checkWorkerOptions(
  options: { tools?: unknown; extensions?: unknown },
  config: { transcriptDir?: string | undefined },
  field: (option: OptionsProblem["field"]) => string = (option) => `options.${option}`,
): void {
  const problem = workerOptionsProblem(options, BUILTIN_TOOL_NAMES, builtinExtensionNames(config));
  if (problem) throw new ValidationError(field(problem.field), problem.message);
}
