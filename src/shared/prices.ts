/**
 * What model steps cost (contracts §13 usage, `agent.budget.maxCostUsd`).
 *
 * `FLEET_PRICES` (a JSON object, or the path of a file holding one) gives, per model, USD per
 * million tokens by kind: `{ "MODEL": { "input": 3, "output": 15, "cacheRead"?: 0.3,
 * "cacheWrite"?: 3.75 } }`. A key is the MODEL's `model` (`claude-sonnet-4-5`), or
 * `provider:model` (`openai:gpt-4o-mini`), which wins over the bare name. It is parsed once,
 * with the rest of the configuration (config.ts); an invalid entry stops the process at start
 * with one line naming every bad entry.
 *
 * The cost of a step with reported usage (`costOf`): `inputTokens` counts every input token,
 * cached ones included, so the uncached input is `inputTokens - cacheReadTokens -
 * cacheWriteTokens`, priced `input`; cache reads are priced `cacheRead` and cache writes
 * `cacheWrite` (each `input` when the entry has none); `outputTokens` (reasoning included) are
 * priced `output`. A step whose provider reported no usage is priced on the estimate of
 * usage.ts, for the budget only (never stored as its cost). A model with no entry has no
 * cost: its steps carry no `costUsd`; an agent with `budget.maxCostUsd` whose model (or a
 * fallback model) has no price is refused at creation (400 naming the model's field), and a
 * run that still meets one parks the session `budget_exhausted` before calling it.
 */
import { readFileSync } from "node:fs";
import { resolve } from "node:path";
import { z } from "zod";
import type { AgentConfig, ModelConfig } from "./agent-config.js";
import type { UsageTotals } from "./api-types.js";
import { FleetStateError, ValidationError } from "./errors.js";
import { GrowingFold } from "./growing-fold.js";
import type { Message, Usage } from "./messages.js";
import type { ModelRouting } from "./model-endpoints.js";

export type { UsageTotals };

const perMillion = z.number().finite().nonnegative();
const priceSchema = z.strictObject({
  input: perMillion,
  output: perMillion,
  cacheRead: perMillion.optional(),
  cacheWrite: perMillion.optional(),
});

/** USD per million tokens, by kind. */
export type ModelPrice = z.infer<typeof priceSchema>;
/** Model key (`model` or `provider:model`) → price. */
export type PriceTable = ReadonlyMap<string, ModelPrice>;

export const NO_PRICES: PriceTable = new Map();

/** The routing the workers and the API get (config.ts `models`), with the price table. */
export type PricedRouting = ModelRouting & { prices?: PriceTable };

/** The price table carried by a routing, or none. */
export function pricesOf(routing: ModelRouting | PricedRouting): PriceTable {
  return (routing as PricedRouting).prices ?? NO_PRICES;
}

/**
 * Parses FLEET_PRICES (a JSON object or a file path). Throws one ValidationError for the
 * variable naming every bad entry.
 */
export function parsePrices(raw: string | undefined, cwd = process.cwd()): PriceTable {
  const text = raw?.trim();
  if (!text) return NO_PRICES;
  let source = text;
  if (!text.startsWith("{")) {
    try {
      // Without a leading byte order mark ("UTF-8 with BOM"), as model-endpoints.ts reads its file.
      source = readFileSync(resolve(cwd, text), "utf8").replace(/^\uFEFF/, "");
    } catch (error) {
      throw new ValidationError("FLEET_PRICES", `cannot read ${text}: ${(error as Error).message}`);
    }
  }
  let value: unknown;
  try {
    value = JSON.parse(source);
  } catch (error) {
    throw new ValidationError("FLEET_PRICES", `not valid JSON: ${(error as Error).message}`);
  }
  if (typeof value !== "object" || value === null || Array.isArray(value))
    throw new ValidationError(
      "FLEET_PRICES",
      'must be a JSON object { "MODEL": { "input", "output", ... } }',
    );
  const table = new Map<string, ModelPrice>();
  const bad: string[] = [];
  for (const [model, entry] of Object.entries(value)) {
    const parsed = priceSchema.safeParse(entry);
    if (model.trim() === "") bad.push(`"" (an empty model name)`);
    else if (!parsed.success) {
      const issue = parsed.error.issues[0]!;
      const field = issue.path.length > 0 ? `${issue.path.join(".")}: ` : "";
      bad.push(`${JSON.stringify(model)} (${field}${issue.message.replace(/^Invalid input: /, "")})`);
    } else table.set(model, parsed.data);
  }
  if (bad.length > 0)
    throw new ValidationError(
      "FLEET_PRICES",
      `bad entries: ${bad.join("; ")} (each needs "input" and "output" in USD per million tokens, optional "cacheRead", "cacheWrite")`,
    );
  return table;
}

/** The price of a model: `provider:model` first, then the bare model name. */
export function priceOf(
  table: PriceTable,
  model: { provider: string; model?: string },
): ModelPrice | undefined {
  if (model.model === undefined) return undefined;
  return table.get(`${model.provider}:${model.model}`) ?? table.get(model.model);
}

/** USD of one step's usage at `price` (see the file comment), rounded to 1e-9 USD. */
export function costOf(usage: Omit<Usage, "costUsd">, price: ModelPrice): number {
  const cacheRead = usage.cacheReadTokens ?? 0;
  const cacheWrite = usage.cacheWriteTokens ?? 0;
  const uncached = Math.max(0, usage.inputTokens - cacheRead - cacheWrite);
  const micro =
    uncached * price.input +
    cacheRead * (price.cacheRead ?? price.input) +
    cacheWrite * (price.cacheWrite ?? price.input) +
    usage.outputTokens * price.output;
  return roundUsd(micro / 1_000_000);
}

export function roundUsd(usd: number): number {
  return Math.round(usd * 1e9) / 1e9;
}

/**
 * USD of what a session's stored token count (`tokens_used`) holds beyond the usage its steps
 * reported: the estimates counted for steps with unknown usage (fenced-writes.ts stores them
 * there, never as a step's usage), priced at the higher of `price`'s input and output prices
 * (a high-side estimate: unknown usage never costs 0 against `agent.budget.maxCostUsd`). Taken
 * at a claim, so that an estimate counts in the session's later runs and resumes too, not only
 * in the run that made it. `reportedTokens`: what the stored steps' usage holds
 * (`reportedUsage`). 0 without a price.
 */
export function unreportedCost(
  tokensUsed: number,
  reportedTokens: number,
  price: ModelPrice | undefined,
): number {
  if (!price) return 0;
  const unreported = Math.max(0, tokensUsed - reportedTokens);
  return roundUsd((unreported * Math.max(price.input, price.output)) / 1_000_000);
}

/**
 * Of these prices, the one `unreportedCost` counts highest (its higher per-token price, input
 * or output); undefined when none is given. A session's unreported tokens may have been spent
 * on any of the models it ran: priced at a cheaper one's, a resume on that model found the
 * budget a dearer model's estimates had spent all but whole again.
 */
export function highestPrice(prices: readonly (ModelPrice | undefined)[]): ModelPrice | undefined {
  let highest: ModelPrice | undefined;
  for (const price of prices)
    if (price && (!highest || Math.max(price.input, price.output) > Math.max(highest.input, highest.output)))
      highest = price;
  return highest;
}

/**
 * The cost and the tokens (input and output) the stored assistant steps of a history reported,
 * summed in order and kept with the array (growing-fold.ts): a job of a long session asks
 * once, and a later job that keeps the history (history-cache.ts) adds only the new steps.
 */
export const reportedUsage = new GrowingFold<Message, { costUsd: number; tokens: number }>(
  () => ({ costUsd: 0, tokens: 0 }),
  (sum, history, from) => {
    for (let i = from; i < history.length; i++) {
      const m = history[i]!;
      if (m.role !== "assistant" || !m.usage) continue;
      sum.costUsd += m.usage.costUsd ?? 0;
      sum.tokens += m.usage.inputTokens + m.usage.outputTokens;
    }
    return sum;
  },
);

/**
 * With `budget.maxCostUsd`, every model the agent may run (its model and fallbacks) must have
 * a price, or the cost could not be bounded: throws a ValidationError naming the model's field.
 * Scripted models have no tokens and cost nothing.
 */
export function assertPricedForBudget(agent: AgentConfig, table: PriceTable, root = "agent"): void {
  if (agent.budget?.maxCostUsd === undefined) return;
  assertModelPriced(agent.model, table, `${root}.model`, `${root}.budget.maxCostUsd`);
  for (const [i, model] of (agent.fallbackModels ?? []).entries())
    assertModelPriced(model, table, `${root}.fallbackModels[${i}]`, `${root}.budget.maxCostUsd`);
}

/**
 * One model that must have a price (`budget`: the budget that needs it, named in the error):
 * a ValidationError naming `<field>.model` otherwise. Also for the model a resume asks for
 * (`POST …/resume {model}`) in the place of an agent with `budget.maxCostUsd`.
 */
export function assertModelPriced(
  model: ModelConfig,
  table: PriceTable,
  field: string,
  budget: string,
): void {
  if (model.provider === "scripted") return;
  if (!priceOf(table, model))
    throw new FleetStateError(
      `${field}.model`,
      `"${model.model}" has no price in FLEET_PRICES, so ${budget} cannot be enforced`,
    );
}

/** Totals of nothing: every count 0. */
export function zeroTotals(): UsageTotals {
  return {
    inputTokens: 0,
    outputTokens: 0,
    cacheReadTokens: 0,
    cacheWriteTokens: 0,
    reasoningTokens: 0,
    costUsd: 0,
    unknownSteps: 0,
  };
}

/** Sums model steps' usage (one entry per step; null/undefined: unknown, counted in `unknownSteps`). Pure. */
export function totalUsage(usages: Iterable<Usage | null | undefined>): UsageTotals {
  const t = zeroTotals();
  for (const u of usages) {
    if (!u) {
      t.unknownSteps += 1;
      continue;
    }
    t.inputTokens += u.inputTokens;
    t.outputTokens += u.outputTokens;
    t.cacheReadTokens += u.cacheReadTokens ?? 0;
    t.cacheWriteTokens += u.cacheWriteTokens ?? 0;
    t.reasoningTokens += u.reasoningTokens ?? 0;
    t.costUsd += u.costUsd ?? 0;
  }
  t.costUsd = roundUsd(t.costUsd);
  return t;
}
