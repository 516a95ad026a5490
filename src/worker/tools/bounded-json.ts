/**
 * JSON.stringify's text of a value, written only up to a bound (pure). A tool's result that is
 * an object is stored as its JSON, cut to MAX_TOOL_RESULT_CHARS (result-text.ts); through
 * JSON.stringify the whole of it was written first — 3 million rows, 186 MB of JSON, held the
 * worker's event loop ~4 s (every other run on it, its leases) and ~0.5 GB of heap for a
 * string that was then cut, and one past V8's longest string failed after all that.
 *
 * The same characters as JSON.stringify for any value (toJSON with its key, boxed primitives,
 * `undefined`, functions and symbols left out of objects and `null` in arrays, non-finite
 * numbers as `null`), and the same errors, first lines alike: a circular structure, a BigInt,
 * a toJSON or getter that throws. Recursive as JSON.stringify is: a nesting far deeper than
 * any real result throws RangeError, which the caller shows as it shows those.
 */

import { types } from "node:util";

/** Thrown inside the walk once the text is long enough; never escapes. */
const ENOUGH = Symbol("enough");

/**
 * JSON.stringify(value)'s text, or its first `maxChars` characters or a few more (`whole`
 * false) when it is longer; undefined where JSON.stringify gives undefined. Throws what
 * JSON.stringify throws.
 */
export function jsonWithin(value: unknown, maxChars: number): { text: string; whole: boolean } | undefined {
  const parts: string[] = [];
  let length = 0;
  const open: object[] = [];
  const write = (text: string) => {
    parts.push(text);
    length += text.length;
    if (length > maxChars) throw ENOUGH;
  };
  /** A string's JSON, of no more of it than the bound has room for (its quotes and escapes aside). */
  const quote = (text: string) =>
    JSON.stringify(text.length > maxChars - length ? text.slice(0, maxChars - length + 1) : text);

  /** A key's JSON: rows repeat the same few keys, each quoted once. */
  const keys = new Map<string, string>();
  const keyJson = (name: string) => {
    let json = keys.get(name);
    if (json === undefined) {
      json = JSON.stringify(name);
      if (keys.size < 1_000) keys.set(name, json);
    }
    return json;
  };

  /** Writes `input` (found at `key`); false when it is left out (undefined, a function, a symbol). */
  function put(key: string, input: unknown): boolean {
    let value = input;
    if (value !== null && (typeof value === "object" || typeof value === "bigint")) {
      const toJSON = (value as { toJSON?: unknown }).toJSON;
      if (typeof toJSON === "function") value = toJSON.call(value, key);
      // By their internal slots, as JSON.stringify does: `instanceof` asks a proxy's prototype,
      // which may throw where JSON.stringify goes on.
      if (typeof value === "object" && types.isBoxedPrimitive(value)) {
        if (types.isNumberObject(value)) value = Number(value);
        else if (types.isStringObject(value)) value = String(value);
        else value = value.valueOf();
      }
    }
    switch (typeof value) {
      case "string":
        write(quote(value));
        return true;
      case "number":
        write(Number.isFinite(value) ? String(value) : "null");
        return true;
      case "boolean":
        write(String(value));
        return true;
      case "bigint":
        throw new TypeError("Do not know how to serialize a BigInt");
      case "undefined":
      case "function":
      case "symbol":
        return false;
    }
    if (value === null) {
      write("null");
      return true;
    }
    const container = value as Record<string, unknown>;
    if (open.includes(container)) throw new TypeError("Converting circular structure to JSON");
    open.push(container);
    if (Array.isArray(container)) {
      write("[");
      for (let i = 0; i < container.length; i++) {
        if (i > 0) write(",");
        if (!put(String(i), container[i])) write("null");
      }
      write("]");
    } else {
      write("{");
      let first = true;
      for (const name of Object.keys(container)) {
        const member = container[name];
        const before = parts.length;
        const lengthBefore = length;
        write(`${first ? "" : ","}${keyJson(name)}:`);
        if (put(name, member)) first = false;
        else {
          // Left out: its key goes too.
          parts.length = before;
          length = lengthBefore;
        }
      }
      write("}");
    }
    open.pop();
    return true;
  }

  try {
    return put("", value) ? { text: parts.join(""), whole: true } : undefined;
  } catch (error) {
    if (error !== ENOUGH) throw error;
    return { text: parts.join(""), whole: false };
  }
}
