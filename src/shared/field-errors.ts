/**
 * The field a 400 names: `messages[2].toolCalls[0].id` from a path, and zod's first issue as a
 * ValidationError naming its field (`messages[2].stopReason: ...`).
 */
import type { z } from "zod";
import { ValidationError } from "./errors.js";

/**
 * `messages[2].toolCalls[0].id` from a zod path under a given root. A key that is not a
 * plain name is quoted (`metadata["a b"]`), so control characters never reach a message raw.
 */
export function formatPath(root: string, path: readonly PropertyKey[]): string {
  let out = root;
  for (const key of path) out = childPath(out, key);
  return out;
}

/** `parent[3]`, `parent.name` or `parent["odd key"]`. */
export function childPath(parent: string, key: PropertyKey): string {
  if (typeof key === "number") return `${parent}[${key}]`;
  const name = String(key);
  if (/^[A-Za-z_$][\w$-]*$/.test(name)) return parent ? `${parent}.${name}` : name;
  return `${parent}[${JSON.stringify(name)}]`;
}

/**
 * The first zod issue as a ValidationError naming its field. A union's failure is said as one
 * of the unions this project validates, told apart by `discriminator` (`role`: a message's,
 * `provider`: a model's); null: as the union itself says it (a tool's own schema,
 * execute-tool.ts), which was said as a message's role list before.
 */
export function toValidationError(
  root: string,
  error: z.ZodError,
  discriminator: string | null = "role",
): ValidationError {
  const issue = namedIssue(error.issues);
  if (!issue) return new ValidationError(root, "invalid");
  if (issue.code === "invalid_union") {
    if (discriminator === null) return unionError(root, issue);
    const path = issue.path.at(-1) === discriminator ? issue.path : [...issue.path, discriminator];
    const options = (issue as { options?: unknown[] }).options;
    const expected =
      discriminator === "role"
        ? '"user", "internal", "assistant", "tool"'
        : (options ?? []).map((o) => JSON.stringify(o)).join(", ");
    return new ValidationError(formatPath(root, path), `must be one of ${expected}`);
  }
  if (isMissing(issue)) return new ValidationError(formatPath(root, issue.path), "is required");
  // Named by its own path (`agent.modle`), as every other field is; it used to be its parent's
  // (`agent`, or "" for the body), and the key only in the message. The others, in the message.
  if (issue.code === "unrecognized_keys") {
    const [first = "", ...others] = issue.keys;
    const also = others.length > 0 ? `; also unknown: ${namedKeys(others)}` : "";
    return new ValidationError(formatPath(root, [...issue.path, cutKey(first)]), `unknown field${also}`);
  }
  return new ValidationError(formatPath(root, issue.path), inWords(issue));
}

/**
 * The issue a 400 names: the first, unless it is a number's safe-integer bound (zod's `.int()`)
 * and the same field has another. `agent.budget.maxTokens` of -2^63 read "Too small: expected
 * int to be >=-9007199254740991", a bound the field never takes: it must be greater than 0.
 */
function namedIssue(issues: readonly z.core.$ZodIssue[]): z.core.$ZodIssue | undefined {
  const [first] = issues;
  if (!first || !((first.code === "too_small" || first.code === "too_big") && first.origin === "int"))
    return first;
  const samePath = (issue: z.core.$ZodIssue) =>
    issue.path.length === first.path.length && issue.path.every((key, i) => key === first.path[i]);
  return issues.slice(1).find(samePath) ?? first;
}

/**
 * What a field must be, for the issues zod words its own way ("Too small: expected number to
 * be >0", "Invalid input: expected int, received number", "Invalid option: expected one of
 * "a"|"b""); a message a schema gave is kept as it is.
 */
function inWords(issue: z.core.$ZodIssue): string {
  const own = issue.message.replace(/^Invalid input: /, "");
  if (issue.code === "invalid_type" && issue.expected === "int" && own.startsWith("expected int,"))
    return "must be a whole number";
  if (issue.code === "invalid_value" && issue.message.startsWith("Invalid option: "))
    return `must be one of ${issue.values.map((v) => JSON.stringify(v)).join(", ")}`;
  const small = issue.code === "too_small" && issue.message.startsWith("Too small: ");
  const big = issue.code === "too_big" && issue.message.startsWith("Too big: ");
  if (!small && !big) return own;
  const bound = Number(
    issue.code === "too_small" ? issue.minimum : issue.code === "too_big" ? issue.maximum : 0,
  );
  const inclusive = (issue as { inclusive?: boolean }).inclusive !== false;
  const origin = (issue as { origin?: string }).origin;
  if (origin === "number" || origin === "int" || origin === "bigint") {
    if (small) return inclusive ? `must be at least ${bound}` : `must be greater than ${bound}`;
    return inclusive ? `must be at most ${bound}` : `must be less than ${bound}`;
  }
  const unit =
    origin === "string" ? "characters" : origin === "array" || origin === "set" ? "items" : undefined;
  if (unit === undefined) return own;
  if (small && unit === "characters" && bound === 1) return "must be a non-empty string";
  return `must be ${small ? "at least" : "at most"} ${bound} ${unit}`;
}

/**
 * zod's words for a field that is missing: "expected nonoptional, received undefined", or of a
 * field of a given type, "expected string, received undefined" (JSON has no undefined: a field
 * that was sent is never read as one).
 */
function isMissing(issue: z.core.$ZodIssue): boolean {
  return (
    issue.code === "invalid_type" &&
    (issue.expected === "nonoptional" || issue.message.endsWith(", received undefined"))
  );
}

/** The most forms of a union whose refusal is said (each its first issue). */
const NAMED_FORMS = 5;

/**
 * A union's refusal in its own words: a discriminated union's values (zod's `options`, the
 * path naming the discriminator), a field none of whose forms may be missing as required, else
 * each form's first issue (`matches none of its forms: expected string, received number; or …`).
 */
function unionError(root: string, issue: z.core.$ZodIssueInvalidUnion): ValidationError {
  const path = formatPath(root, issue.path);
  const options = (issue as { options?: unknown[] }).options;
  if (options && options.length > 0)
    return new ValidationError(path, `must be one of ${options.map((o) => JSON.stringify(o)).join(", ")}`);
  const firsts = issue.errors.map((form) => form[0]).filter((first) => first !== undefined);
  if (firsts.length === 0) return new ValidationError(path, issue.message);
  if (firsts.every((first) => first.path.length === 0 && isMissing(first)))
    return new ValidationError(path, "is required");
  const forms = firsts.slice(0, NAMED_FORMS).map((first) => {
    const where = first.path.length > 0 ? `${formatPath("", first.path)}: ` : "";
    return `${where}${first.message.replace(/^Invalid input: /, "")}`;
  });
  const more = firsts.length - forms.length;
  return new ValidationError(
    path,
    `matches none of its forms: ${forms.join("; or ")}${more > 0 ? `; or ${more} more` : ""}`,
  );
}

/** Unknown keys a 400 names, and how much of each: the answer must not echo a body back. */
const NAMED_KEYS = 10;
const NAMED_KEY_CHARS = 100;

/** `key`, cut with `…` past NAMED_KEY_CHARS. */
function cutKey(key: string): string {
  return key.length > NAMED_KEY_CHARS ? `${key.slice(0, NAMED_KEY_CHARS)}…` : key;
}

/** `"a", "b"`; past NAMED_KEYS keys `… and N more`, each cut by cutKey. */
function namedKeys(keys: readonly string[]): string {
  const named = keys.slice(0, NAMED_KEYS).map((k) => JSON.stringify(cutKey(k)));
  const more = keys.length - named.length;
  return more > 0 ? `${named.join(", ")} and ${more.toLocaleString("en")} more` : named.join(", ");
}
