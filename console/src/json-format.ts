/**
 * JSON text laid out as `JSON.stringify(value, null, 2)` would, without going through a value:
 * every token stays as it is written. Parsed and printed again, a tool's output was not what
 * it said: `12345678901234567890` showed as `12345678901234567000` (another id), `1e999` as
 * `null`, and of two equal keys only the last was shown (`{"cmd": "rm -rf /", "cmd": "ls"}`
 * showed `ls` alone).
 */

/** Whitespace between JSON tokens. */
const SPACE = new Set([" ", "\t", "\n", "\r"]);
/** What ends a number or a literal (`true`, `null`). */
const ENDS_LITERAL = /[\s{}[\],:"]/;

/**
 * The most characters a layout may take: 8 times its text (JSON nested 10 deep, a short value
 * a line, takes about 11), and at least 1,000,000. Indentation grows with depth at every
 * line: `[` nested 5,000 deep (10 KB, what a tool may have read from a web page) took 50 MB,
 * and 20,000 deep more than a string can hold (a RangeError: the page showed no message).
 */
export function maxLayoutLength(textLength: number): number {
  return Math.max(8 * textLength, 1_000_000);
}

/**
 * `text` laid out with two-space indentation, or null when it is not JSON (checked with
 * `JSON.parse`, so that what follows reads tokens of valid JSON only) or would lay out longer
 * than maxLayoutLength (shown as written instead).
 */
export function formatJson(text: string): string | null {
  try {
    JSON.parse(text);
  } catch {
    return null;
  }
  const limit = maxLayoutLength(text.length);
  let out = "";
  let depth = 0;
  const newline = () => `\n${"  ".repeat(depth)}`;
  for (let i = 0; i < text.length; ) {
    if (out.length > limit) return null;
    const c = text[i]!;
    if (SPACE.has(c)) {
      i += 1;
    } else if (c === '"') {
      let end = i + 1;
      while (text[end] !== '"') end += text[end] === "\\" ? 2 : 1;
      out += text.slice(i, end + 1);
      i = end + 1;
    } else if (c === "{" || c === "[") {
      let next = i + 1;
      while (SPACE.has(text[next]!)) next += 1;
      if (text[next] === (c === "{" ? "}" : "]")) {
        out += c === "{" ? "{}" : "[]";
        i = next + 1;
      } else {
        depth += 1;
        out += c + newline();
        i += 1;
      }
    } else if (c === "}" || c === "]") {
      depth -= 1;
      out += newline() + c;
      i += 1;
    } else if (c === ",") {
      out += `,${newline()}`;
      i += 1;
    } else if (c === ":") {
      out += ": ";
      i += 1;
    } else {
      let end = i + 1;
      while (end < text.length && !ENDS_LITERAL.test(text[end]!)) end += 1;
      out += text.slice(i, end);
      i = end;
    }
  }
  return out.length > limit ? null : out;
}
