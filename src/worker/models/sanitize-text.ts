/**
 * Makes model (and tool) output storable as it is (contracts.md §12): Postgres `text` and
 * `jsonb` reject U+0000, and a lone UTF-16 surrogate has no UTF-8 encoding, so either would
 * make an append fail — and a session whose every attempt fails to store its step would never
 * get past it. Such code units are replaced by U+FFFD, which keeps the rest of the text and
 * shows where something was lost. Valid surrogate pairs (emoji, …) are kept.
 *
 * Both helpers are pure and cheap on the common case: one regex test, and the very same value
 * (no copy) when nothing needs replacing.
 */

/**
 * NUL, a high surrogate not followed by a low one, or a low surrogate not preceded by a high
 * one. No `u` flag on purpose: the pattern must see UTF-16 code units, not code points.
 */
// biome-ignore lint/suspicious/noControlCharactersInRegex: matching NUL is the point
const UNSTORABLE = /\u0000|[\uD800-\uDBFF](?![\uDC00-\uDFFF])|(?<![\uD800-\uDBFF])[\uDC00-\uDFFF]/;
const UNSTORABLE_ALL = new RegExp(UNSTORABLE.source, "g");

export const REPLACEMENT_CHARACTER = "\uFFFD";

/** `s` with NUL and lone surrogates replaced by U+FFFD; `s` itself when it has none. */
export function sanitizeText(s: string): string {
  if (!UNSTORABLE.test(s)) return s;
  return s.replace(UNSTORABLE_ALL, REPLACEMENT_CHARACTER);
}

/**
 * A JSON-like value with every string in it sanitised, object keys included (recursively).
 * Returns the same value (same reference) when nothing needed replacing; otherwise a copy of
 * only the arrays/objects on the way to a change. Non-plain values are returned as they are.
 */
export function sanitizeJson<T>(value: T): T {
  return sanitizeValue(value) as T;
}

function sanitizeValue(value: unknown): unknown {
  if (typeof value === "string") return sanitizeText(value);
  if (Array.isArray(value)) {
    let out: unknown[] | undefined;
    for (let i = 0; i < value.length; i++) {
      const item = value[i];
      const clean = sanitizeValue(item);
      if (clean !== item) {
        out ??= value.slice();
        out[i] = clean;
      }
    }
    return out ?? value;
  }
  if (isPlainObject(value)) {
    const keys = Object.keys(value);
    let out: Record<string, unknown> | undefined;
    for (let i = 0; i < keys.length; i++) {
      const key = keys[i]!;
      const item = value[key];
      const cleanKey = sanitizeText(key);
      const clean = sanitizeValue(item);
      if (!out && (cleanKey !== key || clean !== item)) {
        out = Object.create(Object.getPrototypeOf(value)) as Record<string, unknown>;
        for (const earlier of keys.slice(0, i)) defineEntry(out, earlier, value[earlier]);
      }
      // Two keys may now collide ("a\u0000" and "a\uD800"); the later one wins, as in JSON.parse.
      if (out) defineEntry(out, cleanKey, clean);
    }
    return out ?? value;
  }
  return value;
}

/** Sets a key as own data, so a key named `__proto__` stays a plain key (as JSON.parse does). */
function defineEntry(target: Record<string, unknown>, key: string, value: unknown): void {
  Object.defineProperty(target, key, { value, enumerable: true, writable: true, configurable: true });
}

function isPlainObject(value: unknown): value is Record<string, unknown> {
  if (typeof value !== "object" || value === null) return false;
  const proto = Object.getPrototypeOf(value);
  return proto === Object.prototype || proto === null;
}
