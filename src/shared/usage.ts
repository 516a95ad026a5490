/**
 * Tokens of a model step whose provider reported no usage (pure). Such a step's `usage` is
 * `null`, unknown (messages.ts) — but it did consume tokens, and `agent.budget.maxTokens`
 * (contracts §12) must not count it as 0. It counts this estimate instead, on the
 * conservative side (more rather than fewer): one token per `BYTES_PER_TOKEN` UTF-8 bytes,
 * rounded up, of what was sent (system prompt, history, tool specs, as JSON) and of what
 * came back (text and tool calls), plus `MESSAGE_OVERHEAD` per message. Real tokenizers
 * average about 4 bytes per token on English text and code; the estimate overcounts those
 * and stays near the truth for scripts of 3-byte characters.
 */
import { ValidationError } from "./errors.js";
import { GrowingFold } from "./growing-fold.js";
import {
  type AssistantMessage,
  type ImportedMessage,
  type Message,
  parseImportedHistory,
  parseImportedHistoryInSlices,
  type Usage,
} from "./messages.js";

export const BYTES_PER_TOKEN = 3;
export const MESSAGE_OVERHEAD = 4;

/** The estimated tokens of a text (see the file comment). */
export function estimateTokens(text: string): number {
  return Math.ceil(Buffer.byteLength(text, "utf8") / BYTES_PER_TOKEN);
}

/** What a request sent, as far as the estimate is concerned. */
export type SentRequest = {
  system?: string;
  history: readonly Message[];
  tools?: readonly unknown[];
};

/** The estimated tokens of one message as sent (see the file comment). */
function messageTokens(message: Message): number {
  const {
    seq: _seq,
    createdAt: _createdAt,
    usage: _usage,
    ...wire
  } = message as Message & {
    seq?: number;
    createdAt?: string;
    usage?: unknown;
  };
  return estimateTokens(JSON.stringify(wire)) + MESSAGE_OVERHEAD;
}

/**
 * The estimate of a history's messages so far, kept with the array (growing-fold.ts): each
 * model call of a run sends the history again, so each call counts only the messages pushed
 * since (at 50,000 messages, serialising them all took about 60 ms a call).
 */
const historyTokens = GrowingFold.sumOf(messageTokens);

/** Estimated input and output tokens of one step (see the file comment). */
export function estimateStepUsage(
  sent: SentRequest,
  step: Pick<AssistantMessage, "content" | "toolCalls">,
): { inputTokens: number; outputTokens: number } {
  let input = sent.system ? estimateTokens(sent.system) + MESSAGE_OVERHEAD : 0;
  input += historyTokens.of(sent.history);
  if (sent.tools && sent.tools.length > 0) input += estimateTokens(JSON.stringify(sent.tools));
  const output =
    estimateTokens(step.content) +
    (step.toolCalls?.length ? estimateTokens(JSON.stringify(step.toolCalls)) : 0) +
    MESSAGE_OVERHEAD;
  return { inputTokens: input, outputTokens: output };
}

/**
 * The largest token count of one report taken as the provider sent it. No request comes near
 * it; a count above it (a provider's `1e308`, or `1e19`, past Postgres's bigint) is capped
 * here, so that the session's `tokens_used` and the usage sums (bigint) can always store the
 * step (contracts §12: nothing a model sends can make an append fail) and the budget still
 * counts it as the enormous count it claims to be.
 */
export const MAX_REPORTED_TOKENS = 1e12;

/**
 * One token count as a provider reported it: a finite number ≥ 0, truncated and capped at
 * MAX_REPORTED_TOKENS. Anything else — absent, not a number, infinite, NaN, negative — is
 * `undefined`: not a count. A negative count is never 0 tokens: taken as 0, a provider that
 * reports `-5` would spend without ever reaching `agent.budget.maxTokens`.
 */
export function reportedTokens(n: unknown): number | undefined {
  if (typeof n !== "number" || !Number.isFinite(n) || n < 0) return undefined;
  return Math.min(Math.trunc(n), MAX_REPORTED_TOKENS);
}

/**
 * Tokens an imported history's steps reported (input + output of each assistant message's
 * `usage`): they count against `agent.budget.maxTokens` like a run's, since the budget bounds
 * the whole session and a session's usage sums count them too (as `maxCostUsd` counts their
 * `costUsd`). Steps with unknown usage count nothing here: no estimate can be made of a
 * request this fleet never sent.
 */
export function importedTokens(history: readonly Message[]): number {
  let tokens = 0;
  for (const message of history)
    if (message.role === "assistant" && message.usage)
      tokens += message.usage.inputTokens + message.usage.outputTokens;
  return tokens;
}

/**
 * The most tokens the steps of one session's imported history may report in all: a whole
 * number JavaScript reads exactly. Each count is at most that already (messages.ts), but 1,024
 * of them passed Postgres's bigint, so the session's `tokens_used` could not be stored and the
 * import failed with a 500; and a sum past it is no longer exact when read back.
 */
export const MAX_IMPORTED_TOKENS = Number.MAX_SAFE_INTEGER;

/**
 * The most USD the steps of one import (a new session's history, or one page of it) may report
 * in all. Any finite cost was taken before, but every sum of a session's usage is rounded to
 * 1e-9 USD (prices.ts `roundUsd`), which overflows past about 1.8e299: one step of 1e308 made
 * the session's usage (and its batch's results and usage) read `costUsd: null`.
 */
export const MAX_IMPORTED_COST_USD = Number.MAX_SAFE_INTEGER;

/**
 * Refuses (ValidationError naming `root`) an imported history whose steps' usage adds up to more
 * than MAX_IMPORTED_TOKENS tokens, with `held`, what the session holds already (an import
 * continued in pages), or to more than MAX_IMPORTED_COST_USD.
 */
export function assertImportedUsage(history: readonly Message[], root: string, held = 0): void {
  const tokens = held + importedTokens(history);
  if (tokens > MAX_IMPORTED_TOKENS)
    throw new ValidationError(
      root,
      `its steps' usage reports about ${tokens.toPrecision(3)} tokens${held > 0 ? " with what the session holds" : ""}; a session's imported history may report at most ${MAX_IMPORTED_TOKENS} in all`,
    );
  let costUsd = 0;
  for (const message of history)
    if (message.role === "assistant" && message.usage?.costUsd !== undefined)
      costUsd += message.usage.costUsd;
  if (!(costUsd <= MAX_IMPORTED_COST_USD))
    throw new ValidationError(
      root,
      `its steps' usage.costUsd add up to about ${costUsd.toPrecision(3)} USD; one import may report at most ${MAX_IMPORTED_COST_USD} USD in all`,
    );
}

/**
 * `parseImportedHistory` (messages.ts) of a new session's history, its steps' usage bounded in
 * all (assertImportedUsage); a page added to a session is bounded with what it holds
 * (store/imported-pages.ts).
 */
export function parseBoundedImport(value: unknown, root: string): ImportedMessage[] {
  const history = parseImportedHistory(value, root);
  assertImportedUsage(history, root);
  return history;
}

/** `parseBoundedImport`, parsed a slice of messages a turn of the event loop (the API's imports). */
export async function parseBoundedImportInSlices(value: unknown, root: string): Promise<ImportedMessage[]> {
  const history = await parseImportedHistoryInSlices(value, root);
  assertImportedUsage(history, root);
  return history;
}

/**
 * `a` + `b` (pure), each count summed, an optional count present when either has it; no
 * `costUsd` (priced once, on the sum: prices.ts `costOf`). What attempts of one model step
 * reported is added this way (call-model.ts): each was billed.
 */
export function sumUsage(a: Usage | undefined, b: Usage): Usage {
  const sum: Usage = {
    inputTokens: (a?.inputTokens ?? 0) + b.inputTokens,
    outputTokens: (a?.outputTokens ?? 0) + b.outputTokens,
  };
  for (const key of ["cacheReadTokens", "cacheWriteTokens", "reasoningTokens"] as const)
    if (a?.[key] !== undefined || b[key] !== undefined) sum[key] = (a?.[key] ?? 0) + (b[key] ?? 0);
  return sum;
}
