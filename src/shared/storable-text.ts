/**
 * Storable text (contracts.md §12). Postgres `text` and `jsonb` reject U+0000, and a lone
 * UTF-16 surrogate has no UTF-8 encoding (jsonb refuses its escape), so a string holding
 * either cannot be stored. What a caller sends (imported messages, new input, metadata,
 * agent settings) is refused with a 400 naming the field; what a model produces (including
 * a scripted model's steps) is stored with those code units replaced by U+FFFD.
 */
import { ValidationError } from "./errors.js";
import { formatPath } from "./field-errors.js";
import { findInJson } from "./json-walk.js";

/** NUL, or a surrogate that is not half of a pair. No `u` flag: it must see code units. */
// biome-ignore lint/suspicious/noControlCharactersInRegex: matching NUL is the point
const UNSTORABLE = /\u0000|[\uD800-\uDBFF](?![\uDC00-\uDFFF])|(?<![\uD800-\uDBFF])[\uDC00-\uDFFF]/;
const UNSTORABLE_ALL = new RegExp(UNSTORABLE.source, "g");

export const UNSTORABLE_TEXT = "contains U+0000 or a lone UTF-16 surrogate, which cannot be stored";

/** True when Postgres can store `s` as it is. */
export function isStorableText(s: string): boolean {
  return !UNSTORABLE.test(s);
}

/** `s` with NUL and lone surrogates replaced by U+FFFD (`s` itself when it has none). */
export function replaceUnstorable(s: string): string {
  return UNSTORABLE.test(s) ? s.replace(UNSTORABLE_ALL, "\uFFFD") : s;
}

/** A JSON value with `replaceUnstorable` applied to every string and object key in it. */
export function replaceUnstorableJson<T>(value: T): T {
  if (typeof value === "string") return replaceUnstorable(value) as T;
  if (Array.isArray(value)) return value.map((item) => replaceUnstorableJson(item)) as T;
  if (value === null || typeof value !== "object") return value;
  const out: Record<string, unknown> = {};
  for (const [key, item] of Object.entries(value)) {
    // Own data property even for a key named `__proto__`, as JSON.parse makes it.
    Object.defineProperty(out, replaceUnstorable(key), {
      value: replaceUnstorableJson(item),
      enumerable: true,
      writable: true,
      configurable: true,
    });
  }
  return out as T;
}

/**
 * The field of the first string or object key in `value` that cannot be stored (depth
 * first, in document order), e.g. `messages[2].content`; `undefined` when all can be.
 * Iterative, and nothing is allocated per value (json-walk.ts).
 */
export function unstorableField(value: unknown, root: string): string | undefined {
  const path = findInJson(value, (item, key) => (unstorableAt(item, key) ? "stop" : undefined));
  return path === undefined ? undefined : formatPath(root, path);
}

/** Whether a value met in a JSON walk, or the object key it sits under, cannot be stored. */
export function unstorableAt(item: unknown, key: string | number | null): boolean {
  return (
    (typeof key === "string" && !isStorableText(key)) || (typeof item === "string" && !isStorableText(item))
  );
}

/** Throws a ValidationError naming the first field of `value` that cannot be stored. */
export function assertStorable(value: unknown, root: string): void {
  const field = unstorableField(value, root);
  if (field !== undefined) throw new ValidationError(field, UNSTORABLE_TEXT);
}
