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
