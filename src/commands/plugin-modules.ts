/**
 * The modules `fleet worker --tools FILE --extensions FILE` (and `fleet up`) are given:
 * checked to be files, loaded (TypeScript through tsx), their default export read and each
 * tool or extension checked (plugin-checks.ts). Used by serve.ts and up.ts.
 */
import { existsSync, realpathSync, statSync } from "node:fs";
import { createRequire } from "node:module";
import { extname, resolve } from "node:path";
import { pathToFileURL } from "node:url";
import { ValidationError } from "../shared/errors.js";
import { thrownText } from "../shared/thrown-text.js";
import type { Extension } from "../worker/extensions.js";
import { extensionProblem, toolProblem } from "../worker/plugin-checks.js";
import type { Tool } from "../worker/tools/registry.js";
import { exportProblem, type FoundExport, type PluginFlag } from "./module-export.js";
import { shareOwnPackage } from "./share-own-package.js";
import { whereSyntaxError } from "./syntax-error-where.js";

/**
 * Loads user tools: a module whose default export is a Tool or an array of them. A
 * TypeScript file is loaded through tsx, which a checkout has (a dev dependency); an
 * installed package asks for it, or for the file compiled to JavaScript.
 */
export async function loadTools(file: string): Promise<Tool[]> {
  const exported = await loadModuleExport(file, "--tools", "tools");
  const tools = Array.isArray(exported) ? exported : [exported];
  for (const [i, tool] of tools.entries()) {
    const problem = toolProblem(tool, i);
    if (problem) throw new ValidationError("--tools", `${file}: ${problem}`);
  }
  return tools as Tool[];
}

/**
 * Loads extensions (contracts §8): a module whose default export is an extension
 * (`defineExtension({...})`) or an array of them; each needs a `name`, its hooks must be
 * functions, and a function under another name is refused (plugin-checks.ts).
 */
export async function loadExtensions(file: string): Promise<Extension[]> {
  const exported = await loadModuleExport(file, "--extensions", "extensions");
  const list = Array.isArray(exported) ? exported : [exported];
  for (const [i, extension] of list.entries()) {
    const problem = extensionProblem(extension, i);
    if (problem) throw new ValidationError("--extensions", `${file}: ${problem}`);
  }
  return list as Extension[];
}

/** A `--tools` / `--extensions` argument that names no file: refused as a usage error (exit 2). */
export function checkModuleFile(file: string, flag: string): void {
  if (!existsSync(resolve(file))) throw new ValidationError(flag, `${file}: no such file`);
  if (statSync(resolve(file)).isDirectory())
    throw new ValidationError(flag, `${file}: is a folder, not a module file`);
}

/**
 * A module's default export (or its named `fallback` export), loading TypeScript through tsx;
 * one that gives nothing usable (module-export.ts) is a usage error that says what it found.
 */
async function loadModuleExport(file: string, flag: PluginFlag, fallback: string): Promise<unknown> {
  const url = pathToFileURL(resolve(file)).href;
  checkModuleFile(file, flag);
  let module: { default?: unknown };
  // TypeScript goes through tsx from the start: outside a `"type": "module"` package, Node
  // takes a .ts file for CommonJS JavaScript and fails on its types ("Missing initializer
  // in const declaration") instead of refusing the extension, so tsx was never asked.
  const typescript = TYPESCRIPT.test(file);
  if (typescript) await registerTypeScript(file, flag);
  if (typescript) await shareOwnPackage(resolve(file));
  try {
    module = await importOrSay(typescript ? `${url}?typescript` : url, file, flag);
  } catch (error) {
    // A module may throw anything (a string, null): what it threw is said as it can be.
    if (typescript || !LOADED_THROUGH_TSX.has((error as { code?: unknown } | null)?.code)) {
      // tsx's errors name the line themselves; Node's SyntaxError does not.
      const where = !typescript && error instanceof SyntaxError ? whereSyntaxError(resolve(file)) : "";
      throw new Error(`${flag}: ${file} could not be loaded: ${thrownText(error)}${where}`, {
        cause: error,
      });
    }
    await registerTypeScript(file, flag);
    await shareOwnPackage(resolve(file));
    // Another URL: the loader remembers the failed import of the first one.
    module = await importOrSay(`${url}?typescript`, file, flag).catch((again: unknown) => {
      // tsx's errors (a syntax error: esbuild's "Transform failed") name the line themselves.
      throw new Error(`${flag}: ${file} could not be loaded: ${thrownText(again)}`, { cause: again });
    });
  }
  const found = exportOf(module, fallback, typescript ? /\.cts$/.test(file) : loadedAsCommonJs(file));
  const problem = exportProblem(found, flag);
  if (problem) throw new ValidationError(flag, `${file}${problem}`);
  return found.value;
}

/**
 * What a JavaScript module's import failed with when tsx's import loads it: an extension Node
 * does not know, or (with the checkout's sources run through tsx, bin/fleet.js) an ES module
 * in a `.js` file outside a `"type": "module"` package, which Node 20.19+ reads as an ES module
 * by its syntax while tsx's hooks, taking the file for CommonJS, require() it:
 * `Cannot require() ES Module … in a cycle`, exit 1, for a module `node` imports as it is.
 */
const LOADED_THROUGH_TSX: ReadonlySet<unknown> = new Set([
  "ERR_UNKNOWN_FILE_EXTENSION",
  "ERR_REQUIRE_CYCLE_MODULE",
]);

/**
 * Whether Node loaded `file` as CommonJS (a `.cjs` file, a `.js` one outside a `"type":
 * "module"` package with no ES syntax): such a module is in require's cache, an ES module not.
 */
function loadedAsCommonJs(file: string): boolean {
  const cache = createRequire(import.meta.url).cache;
  return cache[resolve(file)] !== undefined || cache[realpathSync(resolve(file))] !== undefined;
}

/**
 * The module's default export, else its export named `fallback`. A TypeScript module that
 * tsx compiled as CommonJS (outside a `"type": "module"` package) arrives as its
 * `module.exports`, which holds the ES exports and `__esModule`: they are read there.
 */
function exportOf(module: { default?: unknown }, fallback: string, commonjs: boolean): FoundExport {
  const exported = module.default as { __esModule?: unknown } | undefined;
  const compiled = exported !== null && typeof exported === "object" && exported.__esModule === true;
  const exports = compiled ? (exported as Record<string, unknown>) : (module as Record<string, unknown>);
  const names = Object.keys(exports).filter((name) => name !== "__esModule");
  return { names, value: exports.default ?? exports[fallback], commonjs: commonjs && !compiled };
}

/**
 * `import(url)`, and if the process runs out of work while it is under way (the module awaits
 * at its top level something that can never settle), one line saying so and exit code 1:
 * before, the worker exited 13 and said nothing at all. One still under way after
 * SLOW_IMPORT_MS is said once on stderr.
 */
async function importOrSay(url: string, file: string, flag: string): Promise<{ default?: unknown }> {
  const never = () => {
    console.error(
      `${commandName()}: ${flag}: ${file} could not be loaded: its import never finished (a top-level await on something that never settles)`,
    );
    process.exit(1);
  };
  process.once("beforeExit", never);
  // One that keeps the process busy meanwhile (a timer, a socket) never lets it run out of
  // work: the worker waited there for ever without a word. Said once; the wait goes on (an
  // import may wait for a slow service on purpose). Unref'd: it keeps nothing alive itself.
  const slow = setTimeout(() => {
    console.error(
      `${commandName()}: ${flag}: ${file}: still loading after ${SLOW_IMPORT_MS / 1000} s (its import has not finished: a top-level await still waiting?)`,
    );
  }, SLOW_IMPORT_MS).unref();
  try {
    return await import(url);
  } finally {
    clearTimeout(slow);
    process.off("beforeExit", never);
  }
}

/** How long a module's import may take before the worker says it is still waiting for it. */
const SLOW_IMPORT_MS = 10_000;

/** The command being run, as its errors begin ("fleet worker"). */
function commandName(): string {
  return `fleet ${process.argv[2] ?? "worker"}`;
}

const TYPESCRIPT = /\.[cm]?tsx?$/;

async function registerTypeScript(file: string, flag: string): Promise<void> {
  let api: { register: () => unknown };
  let cjs: { register: () => unknown };
  try {
    api = await import("tsx/esm/api");
    // A .ts file outside a `"type": "module"` package is CommonJS to Node: tsx's require hook.
    cjs = await import("tsx/cjs/api");
  } catch {
    throw new ValidationError(
      flag,
      `${file} is ${extname(file)} TypeScript: install tsx beside agent-fleet (\`npm install tsx\`) to load it, or compile it to JavaScript`,
    );
  }
  api.register();
  cjs.register();
}
