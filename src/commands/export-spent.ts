/**
 * The `spent` of an export file's end line (session-file.ts): what the session had spent of its
 * `agent.budget` when it was exported (`GET /v1/sessions/:id`'s `spent`, read with the last
 * page), which `fleet session import` keeps (shared/imported-spent.ts). The file is user input:
 * a `spent` that is not counts is refused before anything is created; a low one takes nothing
 * from what the file's steps show. A file without it (an older export) counts its steps alone.
 */
import { type Spent, spentBeyond, spentSchema } from "../shared/imported-spent.js";
import { toValidationError } from "../shared/messages.js";

/** The end line's `spent`, or why it is not one (pure): undefined when the line has none. */
export function fileSpent(end: Record<string, unknown>): Spent | string | undefined {
  if (!("spent" in end)) return undefined;
  const parsed = spentSchema.safeParse(end.spent);
  if (!parsed.success) {
    const error = toValidationError("spent", parsed.error);
    return `the end line's ${error.message}`;
  }
  return { modelCalls: parsed.data.modelCalls ?? 0, tokens: parsed.data.tokens ?? 0 };
}

/**
 * What the import sends as `spentOutsideHistory` (pure): what `spent` holds beyond what the
 * file's steps show (`shown`), undefined when nothing (the steps count anyway).
 */
export function spentToSend(spent: Spent | undefined, shown: Spent): Spent | undefined {
  if (!spent) return undefined;
  const beyond = spentBeyond(spent, shown);
  return beyond.modelCalls === 0 && beyond.tokens === 0 ? undefined : beyond;
}
