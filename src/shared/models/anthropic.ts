/** The anthropic provider. (Being written: see the providers issue.) */
import type { z } from "zod";
import type { anthropicModelSchema } from "../agent-config.js";
import { type ModelEvent, type ModelProvider, ProviderError } from "./provider.js";

export class AnthropicModel implements ModelProvider {
  constructor(
    readonly config: z.infer<typeof anthropicModelSchema>,
    readonly options: { apiKey?: string },
  ) {}

  // biome-ignore lint/correctness/useYield: not written yet
  async *stream(): AsyncIterable<ModelEvent> {
    throw new ProviderError("the anthropic provider is not written yet", false);
  }
}
