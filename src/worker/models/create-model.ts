/** Builds the provider a model configuration names. */
import type { Redis } from "ioredis";
import type { ModelConfig } from "../../shared/agent-config.js";
import { assertNever } from "../../shared/resume-point.js";
import { AnthropicModel } from "./anthropic.js";
import { OpenAIModel } from "./openai.js";
import type { ModelProvider } from "./provider.js";
import { type FaultCounter, ScriptedModel } from "./scripted.js";

export type ModelDeps = {
  faults: FaultCounter;
  /** From the workers' environment only (OPENAI_API_KEY, ANTHROPIC_API_KEY); never from a payload. */
  apiKeys: { openai?: string; anthropic?: string };
};

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

export function createModel(config: ModelConfig, deps: ModelDeps): ModelProvider {
  switch (config.provider) {
    case "scripted":
      return new ScriptedModel(config.steps, { faults: deps.faults });
    case "openai":
      return new OpenAIModel(config, { apiKey: deps.apiKeys.openai });
    case "anthropic":
      return new AnthropicModel(config, { apiKey: deps.apiKeys.anthropic });
    default:
      return assertNever(config);
  }
}
