/**
 * Arrays cut after their first item that fails on its own, before zod parses them whole
 * (pure). zod's arrays parse every item and keep an issue for each that fails, so a body of
 * many bad items made as many issues, each with its path and message: a 2 MB agent of 1,000
 * scripted steps each asking 1,000 tool calls of `0` made a million, ~25 s of the API's event
 * loop and ~1 GB for one 400 (test/agent-parse-first-failure.test.ts). The 400 names the first
 * issue, which the cut array keeps: the items before it pass, and it is kept.
 */
import type { z } from "zod";

/**
 * `items` cut right after the first one `schema` refuses on its own, `cut` applied to each
 * first (for items that hold such arrays themselves); `items` itself when none is refused, or
 * when there are more than `max` (the array's own bound, which zod checks before any item).
 */
export function cutAfterFirstFailure(
  items: readonly unknown[],
  schema: z.ZodType,
  max: number,
  cut: (item: unknown) => unknown = (item) => item,
): readonly unknown[] {
  if (items.length > max) return items;
  for (const [i, item] of items.entries()) {
    const bounded = cut(item);
    if (!schema.safeParse(bounded).success)
      return bounded === item && i === items.length - 1 ? items : [...items.slice(0, i), bounded];
  }
  return items;
}

/**
 * The most keys and items a value may hold, all levels counted, and still be parsed whole at
 * once (`parsedWholeWhenSmall`): zod makes at most a few issues per key or item, so a failing
 * parse of one this small costs no more than the first failure's cut. A scripted agent of a
 * tool call and an answer holds ~15; an agent listing many tools, or many steps, goes through
 * the cut as before (a model with no steps costs the cut nothing).
 */
export const WHOLE_PARSE_NODES = 64;

/**
 * Whether `value` holds at most `max` keys and array items in all (its own and its nested
 * values'). Stops counting once past `max`: an array longer than what is left is not read, nor
 * the values of an object with more keys than that.
 */
export function holdsAtMost(value: unknown, max: number): boolean {
  return nodesLeft(value, max) >= 0;
}

/** `left` less the keys and items of `value`, all levels; negative (not exact) once past it. */
function nodesLeft(value: unknown, left: number): number {
  if (value === null || typeof value !== "object") return left;
  if (Array.isArray(value)) {
    left -= value.length;
    for (let i = 0; i < value.length && left >= 0; i++) left = nodesLeft(value[i], left);
    return left;
  }
  // Counted before any value is read (no array of keys made: for…in over plain data).
  for (const _ in value) left--;
  if (left < 0) return left;
  for (const key in value) {
    left = nodesLeft((value as Record<string, unknown>)[key], left);
    if (left < 0) return left;
  }
  return left;
}

/**
 * `schema`'s parse of `value`, for a small value parsed whole at once, or null: a value past
 * WHOLE_PARSE_NODES, or one that failed, goes through the first failure's cut (the caller's),
 * so what it throws is what it threw before. A value that parses whole gives what the cut
 * would: every item of it passes on its own, so the cut keeps every one. Each scripted step and
 * fallback model was parsed twice before, once alone for the cut and once whole: ~2 % of a
 * worker's CPU in `npm run bench`, whose agents are scripted.
 */
export function parsedWholeWhenSmall<T>(schema: z.ZodType<T>, value: unknown): T | null {
  if (!holdsAtMost(value, WHOLE_PARSE_NODES)) return null;
  const whole = schema.safeParse(value);
  return whole.success ? whole.data : null;
}

/** `value[key]`, when `value` is a JSON object holding an array there. */
export function arrayAt(value: unknown, key: string): readonly unknown[] | undefined {
  if (value === null || typeof value !== "object" || Array.isArray(value)) return undefined;
  const items = (value as Record<string, unknown>)[key];
  return Array.isArray(items) ? items : undefined;
}

/** `value` with `key` holding `items` instead, or `value` itself when they are its own. */
export function withArray(value: unknown, key: string, items: readonly unknown[]): unknown {
  return arrayAt(value, key) === items ? value : { ...(value as object), [key]: items };
}
