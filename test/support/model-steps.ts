/**
 * One model step as the provider tests take it (provider-wire-anthropic, provider-wire-openai,
 * models-today): a request with one tool, sent through callModel with one attempt and no
 * sleeping; the models they point at their fake servers; a tool turn whose call id another
 * provider minted.
 */
import type { AssistantMessage, Message } from "../../src/shared/messages.js";
import { callModel } from "../../src/worker/call-model.js";
import { AnthropicModel } from "../../src/worker/models/anthropic.js";
import { OpenAIModel } from "../../src/worker/models/openai.js";
import type { ModelProvider, ModelRequest, ToolSpec } from "../../src/worker/models/provider.js";

export const noSleep = async () => {};
export const TOOLS: ToolSpec[] = [
  { name: "write_file", description: "Write a file", parameters: { type: "object", properties: {} } },
];

export function req(history: Message[], system = "Be brief."): ModelRequest {
  return { sessionId: "s", system, history, tools: TOOLS, signal: new AbortController().signal };
}

/** The bare request of the tests of a provider's answers: "hi", no system, no tools. */
export function sayHi(): ModelRequest {
  return {
    sessionId: "s",
    history: [{ role: "user", content: "hi" }],
    tools: [],
    signal: new AbortController().signal,
  };
}

/** The step `model` answers to `history`: one attempt; a failed call throws its error. */
export async function step(model: ModelProvider, history: Message[]): Promise<AssistantMessage> {
  const result = await callModel(model, req(history), {
    sleep: noSleep,
    policy: { maxAttempts: 1, baseDelayMs: 1, maxDelayMs: 1 },
  });
  if (!result.ok) throw new Error(result.error);
  return result.message;
}

/** Claude with thinking on (a 2,048-token budget) at `baseUrl`; `extra` overrides the config. */
export function claudeAt(baseUrl: string, extra: Record<string, unknown> = {}): AnthropicModel {
  return new AnthropicModel(
    {
      provider: "anthropic",
      model: "claude-test",
      baseUrl,
      maxTokens: 8000,
      thinking: { type: "enabled", budgetTokens: 2048 },
      ...extra,
    },
    { keyless: true },
  );
}

export const gpt = (api: "chat" | "responses", baseUrl: string) =>
  new OpenAIModel({ provider: "openai", model: "gpt-test", baseUrl, api }, { keyless: true });

/** A tool turn whose call id `id` another provider minted (Kimi-style, vLLM's long one). */
export const foreignToolTurn = (id: string): Message[] => [
  { role: "user", content: "write a" },
  {
    role: "assistant",
    content: "",
    toolCalls: [{ id, name: "write_file", arguments: { path: "a" } }],
    stopReason: "tool_use",
  },
  { role: "tool", toolCallId: id, name: "write_file", content: "ok", success: true },
];

/**
 * The three provider families, keyless, against one fake server at `url` (chat and Responses
 * under `/v1`): what the tests of answers every family must refuse alike run `describe.each` over.
 */
export function everyFamilyAt(url: () => string) {
  return {
    openai: () =>
      new OpenAIModel({ provider: "openai", model: "m", baseUrl: `${url()}/v1` }, { keyless: true }),
    responses: () =>
      new OpenAIModel(
        { provider: "openai", model: "m", baseUrl: `${url()}/v1`, api: "responses" },
        { keyless: true },
      ),
    anthropic: () =>
      new AnthropicModel({ provider: "anthropic", model: "m", baseUrl: url() }, { keyless: true }),
  };
}
