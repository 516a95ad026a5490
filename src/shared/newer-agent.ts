/**
 * What a worker of this release cannot read in a stored agent only because a newer release
 * may have written it (a rolling deploy: a newer API stores it, this worker claims its run):
 * an unknown field, a `provider` or `type` that names no variant this release knows, an enum
 * value it does not list. Anything else that fails the parse (a wrong type, a number out of
 * range, a required field missing, a rule between fields) no release accepted, and the
 * agent is genuinely invalid. Pure: decided from zod's issues and the value itself.
 */
import type { z } from "zod";
import { ValidationError } from "./errors.js";
import { childPath, formatPath } from "./messages.js";

/**
 * An agent this release cannot read, for newer-release reasons only. Its message is the
 * ValidationError's it replaces (the API answers the same 400); `fields` names what is unknown.
 */
export class NewerAgentError extends ValidationError {
  override name = "NewerAgentError";
  constructor(
    error: ValidationError,
    /** The fields (or values) this release does not know, e.g. `agent.newSetting`, `agent.model.provider`. */
    readonly unknown: readonly string[],
  ) {
    super(error.field, error.message.slice(error.field ? error.field.length + 2 : 0));
  }
}

/** The value at `path` inside `value`, or undefined. */
function at(value: unknown, path: readonly PropertyKey[]): unknown {
  let here = value;
  for (const key of path) {
    if (here === null || typeof here !== "object") return undefined;
    here = (here as Record<PropertyKey, unknown>)[key];
  }
  return here;
}

/**
 * The fields of `value` (named under `root`) that only a newer release may have written, when
 * every issue of the failed parse is one of those; null when any issue is not (a genuinely
 * invalid agent).
 */
export function newerFields(
  root: string,
  issues: readonly z.core.$ZodIssue[],
  value: unknown,
): string[] | null {
  const fields: string[] = [];
  for (const issue of issues) {
    const where = formatPath(root, issue.path);
    switch (issue.code) {
      case "unrecognized_keys":
        for (const key of issue.keys) fields.push(childPath(where, key));
        break;
      case "invalid_union":
        // A discriminated union's variant this release lacks: `{"provider": "gemini", …}`.
        if (
          !("discriminator" in issue) ||
          issue.discriminator === undefined ||
          !isName(at(value, issue.path))
        )
          return null;
        fields.push(where);
        break;
      case "invalid_value":
        // An enum value this release does not list: `"api": "realtime"`.
        if (!isName(at(value, issue.path))) return null;
        fields.push(where);
        break;
      default:
        return null;
    }
  }
  return fields.length > 0 ? fields : null;
}

/** A name a newer release could have added: a non-empty string. */
function isName(value: unknown): boolean {
  return typeof value === "string" && value.length > 0;
}
