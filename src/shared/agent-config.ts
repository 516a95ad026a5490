/**
 * AGENT of contracts.md §5, validated at every entry (API, queue payloads, the session row).
 * Its MODEL is model-config.ts, re-exported here. API keys are never part of them: they come
 * from the workers' environment.
 */
import { z } from "zod";
import { ValidationError } from "./errors.js";
import { arrayAt, cutAfterFirstFailure, parsedWholeWhenSmall, withArray } from "./first-failure.js";
import { assertStorable } from "./messages.js";
import { boundedModel, MAX_FALLBACK_MODELS, modelConfigSchema, parseFailure } from "./model-config.js";

export {
  anthropicModelSchema,
  anthropicThinkingSchema,
  DEFAULT_ANTHROPIC_MAX_TOKENS,
  MAX_FALLBACK_MODELS,
  MAX_SCRIPTED_STEPS,
  MIN_RESPONSES_MAX_TOKENS,
  type ModelConfig,
  modelConfigSchema,
  openaiModelSchema,
  parseModelConfig,
  type ScriptedStep,
  scriptedModelSchema,
  scriptedStepSchema,
} from "./model-config.js";

/** The largest Postgres integer: `budget.maxModelCalls` is compared with one (the session's model calls). */
const MAX_INT4 = 2_147_483_647;

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

export type AgentConfig = z.infer<typeof agentConfigSchema>;
export type AgentConfigInput = z.input<typeof agentConfigSchema>;

/**
 * Parses an AGENT. Throws ValidationError naming the field, also for a setting that could
 * not be stored (`agent.system`, `agent.tools[0]`, … holding U+0000 or a lone surrogate);
 * scripted steps are model output and come back with those replaced (see model-config.ts `modelText`).
 * One that fails only on what a newer release may write (an unknown field, provider or enum
 * value) is a NewerAgentError (newer-agent.ts), with the same message.
 */
export function parseAgentConfig(value: unknown, root = "agent"): AgentConfig {
  const whole = parsedWholeWhenSmall(agentConfigSchema, value);
  if (whole !== null) {
    assertStorable(whole, root);
    return whole;
  }
  const bounded = boundedAgent(value);
  const result = agentConfigSchema.safeParse(bounded);
  if (!result.success) throw parseFailure(root, result.error, bounded);
  assertStorable(result.data, root);
  return result.data;
}

/**
 * An AGENT with its model's and its fallback models' scripted steps cut after the first that
 * fails, and its fallback models cut after the first that fails (why: model-config.ts
 * `boundedModel`).
 */
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
