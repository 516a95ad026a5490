/**
 * What an imported session has already spent of `agent.budget` (contracts §12: the budget
 * bounds a whole session across all its runs). A session moved with `fleet session export` /
 * `import` is the same session: made new with nothing spent, one that had used up its
 * `maxModelCalls` or `maxCostUsd` got them whole again by going out and in.
 *
 * Two sources, and the session counts the larger of each:
 * - its history's steps, which no caller can take back: one model call each (every assistant
 *   message is the answer of one), and the tokens their `usage` reports (usage.ts
 *   `importedTokens`; their `costUsd` is read from the steps themselves);
 * - what its caller says was spent beyond them (`spentOutsideHistory` of `POST /v1/sessions`):
 *   model calls that stored no step (an attempt that failed, a call cut by a crash) and tokens
 *   no step reports (failed attempts' billed tokens, the estimates for steps of unknown usage,
 *   which `maxCostUsd` prices as well: prices.ts `unreportedCost`). It is user input at the
 *   fleet's edge: counts only (whole, ≥ 0, storable), and it can only add to the steps'.
 */
import { z } from "zod";
import { ValidationError } from "./errors.js";
import type { Message } from "./messages.js";
import { importedTokens, MAX_IMPORTED_TOKENS } from "./usage.js";

/** The largest Postgres integer, `model_calls`'s type: a count past it is stored as it. */
export const MAX_MODEL_CALLS = 2_147_483_647;

/** What a session spent of its budget: the counters `agent.budget` reads. */
export type Spent = { modelCalls: number; tokens: number };

const count = (max: number) =>
  z
    .number("must be a whole number ≥ 0")
    .int("must be a whole number ≥ 0")
    .nonnegative("must be a whole number ≥ 0")
    .max(max, `must be at most ${max}`);

/** A count of model calls or tokens as an import may state it (the API's field, the file's `spent`). */
export const spentSchema = z.strictObject({
  modelCalls: count(MAX_MODEL_CALLS).optional(),
  tokens: count(MAX_IMPORTED_TOKENS).optional(),
});

/** Model calls a history's steps show: one per assistant message. */
export function importedCalls(history: readonly Message[]): number {
  let calls = 0;
  for (const message of history) if (message.role === "assistant") calls++;
  return calls;
}

/** `a` + `b` model calls, stored as at most MAX_MODEL_CALLS (spent whatever the budget). */
export function addCalls(a: number, b: number): number {
  return Math.min(a + b, MAX_MODEL_CALLS);
}

/**
 * What `spent` (a session's counters) holds beyond what its history's steps show (`shown`):
 * what an import sends as `spentOutsideHistory`, so that the new session counts the larger of
 * the two, whichever pages its steps arrive in. Never below 0: a count lower than the steps'
 * takes nothing from them.
 */
export function spentBeyond(spent: Spent, shown: Spent): Spent {
  return {
    modelCalls: Math.max(0, spent.modelCalls - shown.modelCalls),
    tokens: Math.max(0, spent.tokens - shown.tokens),
  };
}

/** What a history's steps show spent (`importedCalls`, `importedTokens`). */
export function shownSpent(history: readonly Message[]): Spent {
  return { modelCalls: importedCalls(history), tokens: importedTokens(history) };
}

/**
 * The `spentOutsideHistory` of a new session with `history` (its parsed counts), as stored:
 * undefined when it adds nothing; a ValidationError naming `spentOutsideHistory.tokens` when
 * it and the steps' tokens pass MAX_IMPORTED_TOKENS (what a session's `tokens_used` and its
 * budget read exactly).
 */
export function spentOutsideHistory(
  value: { modelCalls?: number | undefined; tokens?: number | undefined } | undefined,
  history: readonly Message[],
): Spent | undefined {
  const spent = { modelCalls: value?.modelCalls ?? 0, tokens: value?.tokens ?? 0 };
  if (spent.modelCalls === 0 && spent.tokens === 0) return undefined;
  const tokens = importedTokens(history) + spent.tokens;
  if (tokens > MAX_IMPORTED_TOKENS)
    throw new ValidationError(
      "spentOutsideHistory.tokens",
      `with the ${importedTokens(history)} tokens the history's steps report, comes to more than the ${MAX_IMPORTED_TOKENS} a session may have spent`,
    );
  return spent;
}
