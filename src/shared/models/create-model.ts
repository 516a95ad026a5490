/** Builds the provider a model configuration names. */
import type { Redis } from "ioredis";
import type { ModelConfig } from "../agent-config.js";
import { assertNever } from "../resume-point.js";
import { type ModelProvider, ProviderError } from "./provider.js";
import { type FaultCounter, ScriptedModel } from "./scripted.js";

export type ModelDeps = { faults: FaultCounter };

/** Fault counts of the scripted model, shared by every worker of a fleet. */
export function redisFaultCounter(redis: Redis, prefix: string): FaultCounter {
  return {
    async increment(key) {
      const k = `${prefix}:scripted-faults:${key}`;
      const [[, count]] = (await redis.multi().incr(k).expire(k, 86_400).exec()) as [[null, number]];
      return count;
    },
  };
}

class UnavailableProvider implements ModelProvider {
  constructor(private readonly provider: string) {}
  // biome-ignore lint/correctness/useYield: fails before any output, by design
  async *stream(): AsyncIterable<never> {
    throw new ProviderError(
      `the "${this.provider}" provider is not available in this build of agent-fleet`,
      false,
    );
  }
}

export function createModel(config: ModelConfig, deps: ModelDeps): ModelProvider {
  switch (config.provider) {
    case "scripted":
      return new ScriptedModel(config.steps, { faults: deps.faults });
    case "openai":
    case "anthropic":
      return new UnavailableProvider(config.provider);
    default:
      return assertNever(config);
  }
}
