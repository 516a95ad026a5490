/**
 * MODEL of contracts.md §5 (an agent's `model` and `fallbackModels`, a resume's `model`),
 * validated at every entry (API, queue payloads, the session row); agent-config.ts, which
 * re-exports it, is the AGENT around it. API keys are never part of it: they come from the
 * workers' environment.
 */
import { z } from "zod";
import type { ValidationError } from "./errors.js";
import { arrayAt, cutAfterFirstFailure, parsedWholeWhenSmall, withArray } from "./first-failure.js";
import {
  assertStorable,
  MAX_TOOL_CALLS_PER_STEP,
  replaceUnstorable,
  replaceUnstorableJson,
  toValidationError,
} from "./messages.js";
import { NewerAgentError, newerFields } from "./newer-agent.js";

/**
 * Where a provider's requests go (contracts.md §11): `endpoint` names one the operator
 * declared in FLEET_MODEL_ENDPOINTS (it brings its base URL and key); a raw `baseUrl` is
 * accepted only under FLEET_ALLOWED_BASE_URLS and never gets a key from the environment.
 * Both are checked against the fleet's configuration by `resolveModelRoute`
 * (model-endpoints.ts), in the API and again on the worker.
 */
const route = {
  endpoint: z.string().min(1).max(100).optional(),
  baseUrl: z.url().optional(),
};

const noApiKey = {
  apiKey: z
    .never({ error: "API keys are never accepted in a payload; set them in the workers' environment" })
    .optional(),
};

/**
 * What a scripted step makes the model say is model output: like any model's output
 * (contracts.md §12) it is stored with U+0000 and lone surrogates replaced by U+FFFD — and
 * since the script itself is stored with the session, that replacement happens here, on
 * parse. Every other string of an agent is the caller's setting and is refused instead.
 */
const modelText = z.string().transform(replaceUnstorable);

export const scriptedStepSchema = z.strictObject({
  text: modelText.optional(),
  toolCalls: z
    .array(
      z.strictObject({
        id: modelText.pipe(z.string().min(1)).optional(),
        name: modelText.pipe(z.string().min(1)),
        arguments: z.record(z.string(), z.unknown()).transform(replaceUnstorableJson).default({}),
      }),
    )
    .max(
      MAX_TOOL_CALLS_PER_STEP,
      `has more than ${MAX_TOOL_CALLS_PER_STEP} tool calls (the most one step may ask for)`,
    )
    .optional(),
  stopReason: modelText.pipe(z.string().min(1)).optional(),
  /** Time to wait before and while streaming the answer. */
  delayMs: z.number().int().nonnegative().max(600_000).optional(),
  /**
   * `connection`: the request fails before any output; `stream_cut`: part of `text` streams,
   * then it breaks; `rejected`: the provider refuses the request as a 401 would (not retryable).
   */
  fault: z.enum(["connection", "stream_cut", "rejected"]).optional(),
  /** How many attempts at this step fail before one succeeds, counted across the fleet; default: all. */
  faultTimes: z.number().int().nonnegative().optional(),
});

/**
 * Steps one scripted MODEL may give, and fallback models one agent may list: each list is
 * parsed on the API's one event loop (and again by the worker that runs the agent), and one
 * of any length up to the 16 MiB body held it for seconds (test/agent-item-bounds.test.ts).
 */
export const MAX_SCRIPTED_STEPS = 10_000;
export const MAX_FALLBACK_MODELS = 100;

export const scriptedModelSchema = z.strictObject({
  provider: z.literal("scripted"),
  steps: z
    .array(scriptedStepSchema)
    .min(1, "needs at least one step")
    .max(MAX_SCRIPTED_STEPS, `has more than ${MAX_SCRIPTED_STEPS.toLocaleString("en")} steps`),
});

/**
 * The least `max_output_tokens` the Responses API accepts (400 `integer_below_min_value`
 * below it). Sending 16 for a smaller `maxTokens` would let a step answer past what the user
 * allowed, so such a MODEL is refused instead.
 */
export const MIN_RESPONSES_MAX_TOKENS = 16;

export const openaiModelSchema = z
  .strictObject({
    provider: z.literal("openai"),
    model: z.string().min(1),
    /** `baseUrl`: for OpenAI-compatible servers (vLLM, Ollama, llama.cpp), e.g. http://127.0.0.1:8080/v1 */
    ...route,
    maxTokens: z.number().int().positive().optional(),
    temperature: z.number().min(0).max(2).optional(),
    /**
     * Which API (contracts §13): `chat` (chat completions, the default; what compatible servers
     * speak) or `responses` (the Responses API: reasoning items are kept and replayed).
     */
    api: z.enum(["chat", "responses"]).optional(),
    /** `reasoning.effort` (responses) / `reasoning_effort` (chat) for reasoning models. */
    reasoningEffort: z.enum(["none", "minimal", "low", "medium", "high", "xhigh", "max"]).optional(),
    ...noApiKey,
  })
  .superRefine((model, ctx) => {
    if (
      model.api === "responses" &&
      model.maxTokens !== undefined &&
      model.maxTokens < MIN_RESPONSES_MAX_TOKENS
    )
      ctx.addIssue({
        code: "custom",
        path: ["maxTokens"],
        message: `must be at least ${MIN_RESPONSES_MAX_TOKENS} with "api": "responses" (the Responses API refuses a smaller max_output_tokens)`,
      });
  });

/** `max_tokens` of an Anthropic request whose MODEL names none. */
export const DEFAULT_ANTHROPIC_MAX_TOKENS = 4096;

/** Anthropic's extended thinking (contracts §13): a token budget, or the model decides. */
export const anthropicThinkingSchema = z.discriminatedUnion("type", [
  z.strictObject({
    type: z.literal("enabled"),
    /** At least 1024, and less than the model's `maxTokens` (thinking counts toward it). */
    budgetTokens: z.number().int().min(1024),
  }),
  z.strictObject({ type: z.literal("adaptive") }),
]);

export const anthropicModelSchema = z
  .strictObject({
    provider: z.literal("anthropic"),
    model: z.string().min(1),
    ...route,
    maxTokens: z.number().int().positive().optional(),
    // No `temperature`: the Messages API version the SDK speaks has no sampling parameters.
    thinking: anthropicThinkingSchema.optional(),
    /** Prompt-caching breakpoints on the system prompt, the tools and the history. Default true. */
    cache: z.boolean().optional(),
    ...noApiKey,
  })
  .superRefine((model, ctx) => {
    const max = model.maxTokens ?? DEFAULT_ANTHROPIC_MAX_TOKENS;
    if (model.thinking?.type === "enabled" && model.thinking.budgetTokens >= max)
      ctx.addIssue({
        code: "custom",
        path: ["thinking", "budgetTokens"],
        message: `must be less than maxTokens (${max}): thinking counts toward it`,
      });
  });

export const modelConfigSchema = z.discriminatedUnion("provider", [
  scriptedModelSchema,
  openaiModelSchema,
  anthropicModelSchema,
]);

export type ScriptedStep = z.infer<typeof scriptedStepSchema>;
export type ModelConfig = z.infer<typeof modelConfigSchema>;

export function parseModelConfig(value: unknown, root = "model"): ModelConfig {
  const whole = parsedWholeWhenSmall(modelConfigSchema, value);
  if (whole !== null) {
    assertStorable(whole, root);
    return whole;
  }
  const bounded = boundedModel(value);
  const result = modelConfigSchema.safeParse(bounded);
  if (!result.success) throw parseFailure(root, result.error, bounded);
  assertStorable(result.data, root);
  return result.data;
}

/**
 * A MODEL with its scripted steps cut after the first that fails (an AGENT's are cut by
 * agent-config.ts `boundedAgent` through this): zod keeps an issue for every bad item of an
 * array, so what is parsed stops at the first (first-failure.ts). The issue a 400 names is the same.
 */
export function boundedModel(value: unknown): unknown {
  const steps = arrayAt(value, "steps");
  return steps
    ? withArray(value, "steps", cutAfterFirstFailure(steps, scriptedStepSchema, MAX_SCRIPTED_STEPS))
    : value;
}

/**
 * The ValidationError of a MODEL or an AGENT that failed to parse, or a NewerAgentError
 * (newer-agent.ts) when it failed only on what a newer release may write.
 */
export function parseFailure(root: string, error: z.ZodError, value: unknown): ValidationError {
  const failure = toValidationError(root, error, "provider");
  const unknown = newerFields(root, error.issues, value);
  return unknown ? new NewerAgentError(failure, unknown) : failure;
}
