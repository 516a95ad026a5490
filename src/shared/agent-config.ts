/**
 * AGENT and MODEL of contracts.md §5, validated at every entry (API, queue payloads, the
 * session row). API keys are never part of them: they come from the workers' environment.
 */
import { z } from "zod";
import { ValidationError } from "./errors.js";
import { arrayAt, cutAfterFirstFailure, withArray } from "./first-failure.js";
import {
  assertStorable,
  MAX_TOOL_CALLS_PER_STEP,
  replaceUnstorable,
  replaceUnstorableJson,
  toValidationError,
} from "./messages.js";
import { NewerAgentError, newerFields } from "./newer-agent.js";

/** The largest Postgres integer: `budget.maxModelCalls` is compared with one (the session's model calls). */
const MAX_INT4 = 2_147_483_647;

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

/** Tools one agent may list (OpenAI chat completions take 128: MAX_OPENAI_CHAT_TOOLS). */
export const MAX_AGENT_TOOLS = 256;

export const agentConfigSchema = z
  .strictObject({
    model: modelConfigSchema,
    /** Names of tools registered in the workers. */
    tools: z
      .array(z.string().min(1))
      .max(MAX_AGENT_TOOLS, `lists more than ${MAX_AGENT_TOOLS} tools`)
      .default([]),
    system: z.string().optional(),
    /** Model calls one run may make before it stops with `max_turns`. Default 20. */
    maxTurns: z.number().int().positive().max(1000).default(20),
    /** Consecutive `paused` steps continued automatically before the run ends `paused`. Default 3. */
    pauseLimit: z.number().int().nonnegative().max(100).default(3),
    /** Whether the sweeper continues a response cut by the output limit (`continue_response`); else it parks. Default true. */
    continueOnMaxOutput: z.boolean().default(true),
    /** Whether the sweeper continues a run that ended `paused` at the pause limit; else it parks. Default true. */
    continueOnPause: z.boolean().default(true),
    /**
     * Bounds on the whole session, across all its runs and resumes (contracts §12): model
     * calls made (counted before each call) and tokens reported (input + output). Reaching
     * one parks the session `budget_exhausted`. The call that crosses `maxTokens` completes.
     */
    budget: z
      .strictObject({
        maxModelCalls: z.number().int().positive().max(MAX_INT4, `must be at most ${MAX_INT4}`).optional(),
        maxTokens: z.number().int().positive().optional(),
        /**
         * USD the session's model steps may cost, by FLEET_PRICES (prices.ts). Every model the
         * agent may run needs a price (400 at creation otherwise).
         */
        maxCostUsd: z.number().positive().finite().optional(),
      })
      .optional(),
    /**
     * A time limit in ms for each of this agent's tool calls: it may only shorten the limit the
     * operator set (FLEET_TOOL_TIMEOUT_MS, or the tool's own `timeoutMs`), never lengthen it.
     * MAX_INT4 is also the longest delay a Node timer takes.
     */
    toolTimeoutMs: z.number().int().positive().max(MAX_INT4, `must be at most ${MAX_INT4}`).optional(),
    /** Models the sweeper falls back to, in order, when the primary keeps failing. */
    fallbackModels: z
      .array(modelConfigSchema)
      .max(MAX_FALLBACK_MODELS, `lists more than ${MAX_FALLBACK_MODELS} fallback models`)
      .optional(),
  })
  .superRefine((agent, ctx) => {
    const models: [ModelConfigOf, string][] = [
      [agent.model, "agent.model"],
      ...(agent.fallbackModels ?? []).map((m, i): [ModelConfigOf, string] => [
        m,
        `agent.fallbackModels[${i}]`,
      ]),
    ];
    const chat = models.find(([m]) => takesToolsUpTo128(m));
    if (chat && agent.tools.length > MAX_OPENAI_CHAT_TOOLS)
      ctx.addIssue({
        code: "custom",
        path: ["tools"],
        message: `lists ${agent.tools.length} tools; OpenAI chat completions take at most ${MAX_OPENAI_CHAT_TOOLS} (${chat[1]})`,
      });
  });

type ModelConfigOf = z.infer<typeof modelConfigSchema>;

/**
 * The most tools a chat completion request may list ("A max of 128 functions are supported":
 * 400 `array_above_max_length` beyond): with more, every request of the model would be
 * refused. A MODEL with a raw `baseUrl` is a compatible server (vLLM, Ollama), which has no
 * such limit; one at OpenAI or at a declared endpoint (which may be OpenAI) is held to it.
 */
export const MAX_OPENAI_CHAT_TOOLS = 128;

function takesToolsUpTo128(model: ModelConfigOf): boolean {
  return model.provider === "openai" && (model.api ?? "chat") === "chat" && model.baseUrl === undefined;
}

/**
 * A resume's model runs the agent's tools too: the same limit (MAX_OPENAI_CHAT_TOOLS). Throws
 * a ValidationError naming `path`.
 */
export function assertToolsFit(model: ModelConfigOf, agent: Pick<AgentConfig, "tools">, path: string): void {
  if (takesToolsUpTo128(model) && agent.tools.length > MAX_OPENAI_CHAT_TOOLS)
    throw new ValidationError(
      path,
      `OpenAI chat completions take at most ${MAX_OPENAI_CHAT_TOOLS} tools; the session's agent lists ${agent.tools.length}`,
    );
}

/** What the resume policy reads of an agent (resume-policy.ts `decideResume`). */
export type ResumeSettings = Pick<
  AgentConfig,
  "maxTurns" | "continueOnMaxOutput" | "continueOnPause" | "fallbackModels"
>;

const resumeSettingsSchema = z.object({
  maxTurns: agentConfigSchema.shape.maxTurns,
  continueOnMaxOutput: agentConfigSchema.shape.continueOnMaxOutput,
  continueOnPause: agentConfigSchema.shape.continueOnPause,
});

/**
 * The resume settings of an agent this release cannot read whole because a newer release
 * wrote it (NewerAgentError): the ones this release knows, read as it reads them, and no
 * fallback models (their MODELs may be what it cannot read); null when even those do not
 * read. The resume's worker reads the whole agent, or hands the run back for a newer one.
 */
export function resumeSettingsOfNewer(value: unknown): ResumeSettings | null {
  const result = resumeSettingsSchema.safeParse(value);
  return result.success ? result.data : null;
}

export type ScriptedStep = z.infer<typeof scriptedStepSchema>;
export type ModelConfig = z.infer<typeof modelConfigSchema>;
export type AgentConfig = z.infer<typeof agentConfigSchema>;
export type AgentConfigInput = z.input<typeof agentConfigSchema>;

/**
 * Parses an AGENT. Throws ValidationError naming the field, also for a setting that could
 * not be stored (`agent.system`, `agent.tools[0]`, … holding U+0000 or a lone surrogate);
 * scripted steps are model output and come back with those replaced (see `modelText`).
 * One that fails only on what a newer release may write (an unknown field, provider or enum
 * value) is a NewerAgentError (newer-agent.ts), with the same message.
 */
export function parseAgentConfig(value: unknown, root = "agent"): AgentConfig {
  const bounded = boundedAgent(value);
  const result = agentConfigSchema.safeParse(bounded);
  if (!result.success) throw parseFailure(root, result.error, bounded);
  assertStorable(result.data, root);
  return result.data;
}

export function parseModelConfig(value: unknown, root = "model"): ModelConfig {
  const bounded = boundedModel(value);
  const result = modelConfigSchema.safeParse(bounded);
  if (!result.success) throw parseFailure(root, result.error, bounded);
  assertStorable(result.data, root);
  return result.data;
}

/**
 * A MODEL with its scripted steps cut after the first that fails, an AGENT with its model's
 * and its fallback models' too, and its fallback models cut after the first that fails: zod
 * keeps an issue for every bad item of an array, so what is parsed stops at the first
 * (first-failure.ts). The issue a 400 names is the same.
 */
function boundedModel(value: unknown): unknown {
  const steps = arrayAt(value, "steps");
  return steps
    ? withArray(value, "steps", cutAfterFirstFailure(steps, scriptedStepSchema, MAX_SCRIPTED_STEPS))
    : value;
}

function boundedAgent(value: unknown): unknown {
  if (value === null || typeof value !== "object" || Array.isArray(value)) return value;
  const given = (value as { model?: unknown }).model;
  const model = boundedModel(given);
  const agent = model === given ? value : { ...value, model };
  const fallbacks = arrayAt(agent, "fallbackModels");
  return fallbacks
    ? withArray(
        agent,
        "fallbackModels",
        cutAfterFirstFailure(fallbacks, modelConfigSchema, MAX_FALLBACK_MODELS, boundedModel),
      )
    : agent;
}

function parseFailure(root: string, error: z.ZodError, value: unknown): ValidationError {
  const failure = toValidationError(root, error, "provider");
  const unknown = newerFields(root, error.issues, value);
  return unknown ? new NewerAgentError(failure, unknown) : failure;
}
