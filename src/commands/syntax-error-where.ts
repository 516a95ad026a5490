/**
 * Where a `--tools` / `--extensions` module's syntax error is. Node's SyntaxError of an
 * `import()` says only what ("Unexpected token ','"): an ES module's file and line are in no
 * property of the error, and a CommonJS one's only in its stack. `node --check FILE` prints
 * them, as Node does for an uncaught error: `FILE:LINE`, the line's text, a caret.
 */
import { spawnSync } from "node:child_process";

/** The longest part of the offending line the message repeats. */
const SOURCE_MAX = 120;

/**
 * ` at line N: TEXT` from what `node --check` wrote to stderr, or "" when it names no line (the
 * file itself parses: the error came from a module it imports, or from its code as it ran).
 */
export function syntaxErrorWhere(checkStderr: string): string {
  const [location, source] = checkStderr.split("\n");
  const line = /:(\d+)$/.exec(location ?? "")?.[1];
  if (!line) return "";
  const text = (source ?? "").trim();
  const shown = text.length > SOURCE_MAX ? `${text.slice(0, SOURCE_MAX)}…` : text;
  return shown ? ` at line ${line}: ${shown}` : ` at line ${line}`;
}

/** `syntaxErrorWhere` of `node --check FILE` (a JavaScript file; "" when the check cannot run). */
export function whereSyntaxError(path: string): string {
  const check = spawnSync(process.execPath, ["--check", path], { encoding: "utf8", timeout: 10_000 });
  if (check.status === 0 || typeof check.stderr !== "string") return "";
  return syntaxErrorWhere(check.stderr);
}
