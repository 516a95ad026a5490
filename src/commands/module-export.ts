/**
 * What a `--tools` or `--extensions` module gave, when it gave nothing a worker can use, in one
 * line that says what was found and what is expected. Pure: plugin-modules.ts loads the
 * module and reads what it found. Before, an empty ES module said only "exports no tools", a
 * module with named exports and no default the same, and a CommonJS module (whose
 * `module.exports` is its default export) "tool 0 has no name".
 */

/** What a module exported. */
export type FoundExport = {
  /** The names of its exports (an ES module's namespace keys; `default` for CommonJS). */
  names: string[];
  /** Its default export, else its export named after the flag (`tools`, `extensions`). */
  value: unknown;
  /** Node loaded it as CommonJS: `value` is its `module.exports`. */
  commonjs: boolean;
};

/** What each flag expects of its module. */
const WANTED = {
  "--tools": {
    what: "a tool or an array of tools",
    example: "[defineTool({ name, description, parameters, run }), ...]",
    // `require("agent-fleet")` is refused (an ES-module package): plain objects.
    commonjs: "[{ name, description, parameters, run }, ...]",
    one: "a tool",
  },
  "--extensions": {
    what: "an extension or an array of them",
    example: "defineExtension({ name, ... })",
    commonjs: "{ name, ...hooks }",
    one: "an extension",
  },
} as const;

export type PluginFlag = keyof typeof WANTED;

/**
 * The end of the line that starts with the file's name (` is empty: …`, `: its default export
 * is …`) saying why `found` gives no tools or extensions; null when it may (each item is checked
 * then by plugin-checks.ts).
 */
export function exportProblem(found: FoundExport, flag: PluginFlag): string | null {
  const wanted = WANTED[flag];
  const expected = found.commonjs
    ? `expected module.exports = ${wanted.commonjs} (${wanted.what}), or an ES module with export default`
    : `expected export default ${wanted.example} (${wanted.what})`;
  const { value } = found;
  const holds = found.commonjs ? "its module.exports is" : "its default export is";
  if (!found.commonjs && found.names.length === 0) return ` is empty: it exports nothing; ${expected}`;
  if (!found.commonjs && value === undefined && !found.names.includes("default"))
    return ` has no default export (it exports only ${found.names.join(", ")}); ${expected}`;
  if (value === undefined || value === null) return `: ${holds} ${String(value)}; ${expected}`;
  if (Array.isArray(value) && value.length === 0) return `: ${holds} an empty array; ${expected}`;
  // CommonJS that set properties of `exports` (or nothing at all) instead of module.exports.
  if (found.commonjs && typeof value === "object" && !Array.isArray(value) && !("name" in value)) {
    const keys = Object.keys(value);
    if (keys.length === 0) return ` is CommonJS and sets nothing on module.exports; ${expected}`;
    return ` is CommonJS and its module.exports is an object of ${keys.join(", ")}, not ${wanted.one} (it has no name); ${expected}`;
  }
  return null;
}
