/**
 * A TypeScript `--tools` or `--extensions` module outside a `"type": "module"` package is
 * compiled by tsx as CommonJS, so its `import { defineTool } from "agent-fleet"` becomes
 * `require("agent-fleet")` — which the package answers with esm-only.cjs's error (its root
 * is an ES module only). The README's own examples failed so in a project `npm init -y` made.
 * When that `require` would load this very package's esm-only.cjs, it is given this process's
 * own agent-fleet instead (the module already running the worker, so the tools it defines
 * are the worker's own kind). Another copy of agent-fleet is left alone: it says what it says.
 */
import { createRequire, Module } from "node:module";

export async function shareOwnPackage(file: string): Promise<void> {
  const fromFile = createRequire(file);
  let wanted: string;
  let own: string;
  try {
    wanted = fromFile.resolve("agent-fleet");
    own = createRequire(import.meta.url).resolve("agent-fleet");
  } catch {
    return; // the module's folder has no agent-fleet: its import fails as Node says.
  }
  if (wanted !== own || fromFile.cache[own] !== undefined) return;
  const root = await import("../index.js");
  const shared = new Module(own);
  shared.filename = own;
  shared.loaded = true;
  shared.exports = root;
  fromFile.cache[own] = shared;
}
