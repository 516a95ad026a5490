/**
 * The built-in tools over a tool directory of their own, for a test file: a temporary
 * directory `base` (removed after the file), its `tools` folder as the tool directory (made,
 * with `folders` inside it), and the registry of `builtinTools` over it. Call at the top level
 * of the file: `const tools = useBuiltinTools("fleet-x-");`, then `tools.call(name, args)`.
 */
import { mkdir, mkdtemp, rm } from "node:fs/promises";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { afterAll, beforeAll } from "vitest";
import { builtinTools } from "../../src/worker/tools/builtin.js";
import { executeTool } from "../../src/worker/tools/execute-tool.js";
import { ToolRegistry } from "../../src/worker/tools/registry.js";

/** A tool call's context: call "c" of session "s", never aborted. */
export const toolContext = () => ({
  callId: "c",
  callKey: "k",
  sessionId: "s",
  signal: new AbortController().signal,
});

export type BuiltinTools = {
  base: string;
  toolDir: string;
  registry: ToolRegistry;
  /** Runs the tool `name` as the worker does, with `toolContext()`. */
  call: (name: string, args: Record<string, unknown>) => ReturnType<typeof executeTool>;
};

/** `prefix` names the temporary directory; `folders` are made in the tool directory, paths relative to it. */
export function useBuiltinTools(prefix: string, ...folders: string[]): BuiltinTools {
  const tools = {
    call: (name, args) => executeTool(tools.registry.get(name), name, args, toolContext()),
  } as BuiltinTools;
  beforeAll(async () => {
    tools.base = await mkdtemp(join(tmpdir(), prefix));
    tools.toolDir = join(tools.base, "tools");
    for (const folder of folders.length > 0 ? folders : [""])
      await mkdir(join(tools.toolDir, folder), { recursive: true });
    tools.registry = new ToolRegistry().register(...builtinTools(tools.toolDir));
  });
  afterAll(async () => {
    if (tools.base) await rm(tools.base, { recursive: true, force: true });
  });
  return tools;
}
