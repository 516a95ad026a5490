/** The openai provider. (Being written: see the providers issue.) */
import type { z } from "zod";
import type { openaiModelSchema } from "../agent-config.js";
import { type ModelEvent, type ModelProvider, ProviderError } from "./provider.js";

export class OpenAIModel implements ModelProvider {
  constructor(
    readonly config: z.infer<typeof openaiModelSchema>,
    readonly options: { apiKey?: string },
  ) {}

  // biome-ignore lint/correctness/useYield: not written yet
  async *stream(): AsyncIterable<ModelEvent> {
    throw new ProviderError("the openai provider is not written yet", false);
  }
}
