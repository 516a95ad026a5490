/**
 * Text for a value thrown (or returned) by operator code written in plain JavaScript: a user
 * tool or an extension hook may throw a string, a plain `{ message, code }` object, an object
 * with no prototype, or an Error whose `message` is no string. `String(value)` throws for some
 * of these (no `toString`, a circular object), and a throw there escaped the code that was to
 * record the failure (pure; never throws).
 */

/** The text a value of no string form gets. */
export const NO_TEXT = "(a value that cannot be shown as text)";

/** The best text `value` has: an Error's or an object's string `message`, else its string form. */
export function thrownText(value: unknown): string {
  try {
    if (typeof value === "string") return value;
    if (value !== null && typeof value === "object") {
      const message = (value as { message?: unknown }).message;
      if (typeof message === "string") return message;
    }
  } catch {
    // A `message` getter that throws: the string form below.
  }
  const text = textOf(value);
  if (text !== "[object Object]") return text;
  // `String` of a plain object says nothing (`{ code: 7 }` thrown): its JSON says what it holds.
  try {
    return JSON.stringify(value) ?? text;
  } catch {
    return text;
  }
}

/** `String(value)`; its JSON for an object without a string form, NO_TEXT when it has neither. */
export function textOf(value: unknown): string {
  try {
    return String(value);
  } catch {
    // No toString (an object with no prototype): its JSON, below.
  }
  try {
    return JSON.stringify(value) ?? NO_TEXT;
  } catch {
    return NO_TEXT;
  }
}
