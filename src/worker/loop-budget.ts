/**
 * The agent loop's bookkeeping of `agent.budget` (contracts §12) and of usage: whether the
 * budget allows another model call, the session's cost so far, a step's usage added to the
 * run's and to `fleet_model_tokens_total`, and what failed attempts billed without a step.
 * Narrow inputs (agent-loop.ts passes its LoopInput and deps).
 */
import { type AgentConfig, type ModelConfig, parseModelConfig } from "../shared/agent-config.js";
import type { Message, RunUsage, Usage } from "../shared/messages.js";
import type { FleetMetrics } from "../shared/metrics.js";
import { highestPrice, type ModelPrice, reportedUsage, roundUsd, unreportedCost } from "../shared/prices.js";
import type { Fence, FencedWrites } from "../shared/store/fenced-writes.js";
import type { ModelIdentity, ModelProvider } from "./models/provider.js";

/** What the budget reads of a loop's input (agent-loop.ts LoopInput). */
export type BudgetInput = {
  fence: Fence;
  agent: Pick<AgentConfig, "budget">;
  model: { readonly identity?: ModelIdentity };
  history: readonly Message[];
  budget?: { tokensUsed: number; costUsd?: number };
  /**
   * The price the session's unreported tokens count at (`unreportedPrice`): the highest of the
   * models it may have run on; absent, the run's model's.
   */
  unreportedPrice?: ModelPrice | undefined;
};

/** What the budget uses of the loop's deps. */
export type BudgetDeps = {
  writes: Pick<FencedWrites, "reserveModelCall">;
  metrics: Partial<Pick<FleetMetrics, "modelTokens">>;
};

/**
 * Whether `agent.budget` forbids another model call (contracts §12), and why. Tokens are
 * checked from memory; a model call is counted in Postgres before it is made (only for
 * agents with `maxModelCalls`), so a call cut off by a crash counts as well. `billed`: what
 * the failed attempts of the call being retried reported (call-model.ts), counted with it.
 */
export async function budgetSpent(
  input: BudgetInput,
  deps: BudgetDeps,
  billed?: Usage,
): Promise<string | null> {
  const budget = input.agent.budget;
  if (!budget) return null;
  const used = (input.budget?.tokensUsed ?? 0) + (billed ? billed.inputTokens + billed.outputTokens : 0);
  if (budget.maxTokens !== undefined && used >= budget.maxTokens)
    return `agent.budget.maxTokens: ${used} of ${budget.maxTokens} tokens used`;
  if (budget.maxCostUsd !== undefined) {
    const identity = input.model.identity;
    // A model with tokens but no price cannot be bounded: it is not called (prices.ts).
    if (identity && !identity.price)
      return `agent.budget.maxCostUsd: model "${identity.model}" has no price in FLEET_PRICES, so its cost cannot be bounded`;
    const spent = roundUsd(costSpent(input) + (billed?.costUsd ?? 0));
    if (spent >= budget.maxCostUsd)
      return `agent.budget.maxCostUsd: ${spent} of ${budget.maxCostUsd} USD used`;
  }
  if (
    budget.maxModelCalls !== undefined &&
    !(await deps.writes.reserveModelCall(input.fence, budget.maxModelCalls))
  )
    return `agent.budget.maxModelCalls: all ${budget.maxModelCalls} model calls made`;
  return null;
}

/**
 * The price a session's unreported tokens (prices.ts `unreportedCost`) count at, for an agent
 * with `budget.maxCostUsd`: the highest of the run's model's, the agent's own models' (its
 * model and fallback models) and those its earlier runs were asked to run on (`earlier`, as
 * stored: a resume's model), for its estimates may have been made on any of them. Priced at
 * the run's model alone, a resume on a cheaper model, or the agent's model after a resume on
 * a dearer one, priced what the dearer one had spent at the cheap one's price
 * (test/cost-budget-model-switch.test.ts). A model this worker cannot read or build (a newer
 * release's, a route not allowed) adds no price.
 */
export function unreportedPrice(
  agent: { model: ModelConfig; fallbackModels?: readonly ModelConfig[] | undefined },
  run: { readonly identity?: ModelIdentity },
  models: (config: ModelConfig, field: string) => ModelProvider,
  earlier: readonly unknown[] = [],
): ModelPrice | undefined {
  const priceOf = (config: unknown): ModelPrice | undefined => {
    try {
      return models(parseModelConfig(config, "run.model"), "run.model").identity?.price;
    } catch {
      return undefined;
    }
  };
  const configs = [agent.model, ...(agent.fallbackModels ?? []), ...earlier];
  return highestPrice([run.identity?.price, ...configs.map(priceOf)]);
}

/**
 * USD the session's steps cost so far (LoopInput.budget.costUsd, summed from the history once
 * per claim): their stored `costUsd`, and the stored estimates of steps with unknown usage
 * (prices.ts `unreportedCost`), which no step's usage carries.
 */
function costSpent(input: BudgetInput): number {
  if (!input.budget) input.budget = { tokensUsed: 0 };
  const budget = input.budget;
  if (budget.costUsd === undefined) {
    const reported = reportedUsage.of(input.history);
    const price = input.unreportedPrice ?? input.model.identity?.price;
    const estimated = unreportedCost(budget.tokensUsed, reported.tokens, price);
    budget.costUsd = roundUsd(roundUsd(reported.costUsd) + estimated);
  }
  return budget.costUsd;
}

/**
 * Counts what failed attempts billed without a step (call-model.ts `billed`): in the run's
 * usage, the token metric and the budget in memory. The session's count holds its tokens
 * already: each attempt's were stored as it failed (billed-tokens.ts).
 */
export function countBilled(input: BudgetInput, deps: BudgetDeps, usage: RunUsage, billed: Usage): void {
  addUsage(usage, billed);
  countTokens(deps, input.model.identity, billed);
  const tokens = billed.inputTokens + billed.outputTokens;
  if (input.budget) {
    if (input.budget.costUsd !== undefined && billed.costUsd !== undefined)
      input.budget.costUsd = roundUsd(input.budget.costUsd + billed.costUsd);
    input.budget.tokensUsed += tokens;
  }
}

/** Adds a step's usage to the run's. */
export function addUsage(total: Usage, step: Usage): void {
  total.inputTokens += step.inputTokens;
  total.outputTokens += step.outputTokens;
  for (const key of ["cacheReadTokens", "cacheWriteTokens", "reasoningTokens"] as const)
    if (step[key] !== undefined) total[key] = (total[key] ?? 0) + step[key];
  if (step.costUsd !== undefined) total.costUsd = roundUsd((total.costUsd ?? 0) + step.costUsd);
}

/** `fleet_model_tokens_total{provider,kind}`: what the provider reported (`input` counts cached tokens too). */
export function countTokens(deps: BudgetDeps, identity: ModelIdentity | undefined, usage: Usage): void {
  const counter = deps.metrics.modelTokens;
  if (!counter || !identity) return;
  const { provider } = identity;
  counter.inc({ provider, kind: "input" }, usage.inputTokens);
  counter.inc({ provider, kind: "output" }, usage.outputTokens);
  if (usage.cacheReadTokens) counter.inc({ provider, kind: "cache_read" }, usage.cacheReadTokens);
  if (usage.cacheWriteTokens) counter.inc({ provider, kind: "cache_write" }, usage.cacheWriteTokens);
  if (usage.reasoningTokens) counter.inc({ provider, kind: "reasoning" }, usage.reasoningTokens);
}
