/**
 * The model adapters against what the real APIs send and refuse (contracts §13,
 * resume-semantics §6), through the real SDKs and local servers that speak each wire protocol
 * (fake-anthropic.ts, fake-openai.ts, fake-openai-responses.ts): replays the real services
 * refuse (a reasoning item without its following item, a tool turn without its thinking
 * block, an unsigned thinking block), and the wire details of each API the adapters must read
 * as the SDKs' types document them.
 */
import { afterAll, beforeAll, beforeEach, describe, expect, it } from "vitest";
import type { AssistantMessage, Message } from "../src/shared/messages.js";
import { resumePoint } from "../src/shared/resume-point.js";
import { callModel } from "../src/worker/call-model.js";
import { AnthropicModel } from "../src/worker/models/anthropic.js";
import { OpenAIModel } from "../src/worker/models/openai.js";
import type { ModelRequest, ToolSpec } from "../src/worker/models/provider.js";
import { type FakeAnthropic, startFakeAnthropic } from "./support/fake-anthropic.js";
import { type FakeOpenAI, startFakeOpenAI } from "./support/fake-openai.js";
import { type FakeResponses, startFakeResponses } from "./support/fake-openai-responses.js";

const noSleep = async () => {};
const TOOLS: ToolSpec[] = [
  { name: "write_file", description: "Write a file", parameters: { type: "object", properties: {} } },
];

function req(history: Message[]): ModelRequest {
  return { sessionId: "s", system: "Be brief.", history, tools: TOOLS, signal: new AbortController().signal };
}

async function step(model: AnthropicModel | OpenAIModel, history: Message[]): Promise<AssistantMessage> {
  const result = await callModel(model, req(history), {
    sleep: noSleep,
    policy: { maxAttempts: 1, baseDelayMs: 1, maxDelayMs: 1 },
  });
  if (!result.ok) throw new Error(result.error);
  return result.message;
}

/** The internal message a `continue_response` resume appends (resume-plan.ts's wording is not asserted). */
const CONTINUE: Message = { role: "internal", content: "Continue exactly where you stopped." };

let anthropic: FakeAnthropic;
let responses: FakeResponses;
let chat: FakeOpenAI;
beforeAll(async () => {
  [anthropic, responses, chat] = await Promise.all([
    startFakeAnthropic(),
    startFakeResponses(),
    startFakeOpenAI(),
  ]);
});
afterAll(async () => {
  await Promise.all([anthropic?.close(), responses?.close(), chat?.close()]);
});
beforeEach(() => {
  anthropic.requests.length = 0;
  responses.requests.length = 0;
  chat.requests.length = 0;
});

const claude = (extra: Record<string, unknown> = {}) =>
  new AnthropicModel(
    {
      provider: "anthropic",
      model: "claude-test",
      baseUrl: anthropic.url,
      maxTokens: 8000,
      thinking: { type: "enabled", budgetTokens: 2048 },
      ...extra,
    },
    { keyless: true },
  );
const gpt = (api: "chat" | "responses", baseUrl: string) =>
  new OpenAIModel({ provider: "openai", model: "gpt-test", baseUrl, api }, { keyless: true });

describe("openai responses: a reasoning item goes back only with the item that follows it", () => {
  it("max_output_tokens reached while reasoning: continue_response leaves the lone reasoning item out", async () => {
    const model = gpt("responses", responses.url);
    responses.script({ reasoning: true, incomplete: "max_output_tokens" }, { text: ["Done."] });
    const history: Message[] = [{ role: "user", content: "think hard" }];
    const first = await step(model, history);
    expect(first).toMatchObject({ content: "", stopReason: "max_output" });
    expect(resumePoint([...history, first])).toMatchObject({ resumable: true, kind: "continue_response" });
    history.push(first, CONTINUE);
    const second = await step(model, history);
    expect(second).toMatchObject({ content: "Done.", stopReason: "end_turn" });
    expect(responses.requests[1]!.body.input).toEqual([
      { role: "user", content: "think hard" },
      { role: "user", content: CONTINUE.content },
    ]);
  });

  it("max_output_tokens in a call after reasoning: neither the call nor its reasoning is replayed", async () => {
    const model = gpt("responses", responses.url);
    responses.script(
      {
        reasoning: true,
        functionCalls: [{ callId: "call_9", name: "write_file", arguments: '{"pa' }],
        incomplete: "max_output_tokens",
      },
      { text: ["ok"] },
    );
    const history: Message[] = [{ role: "user", content: "write" }];
    const first = await step(model, history);
    expect(first.stopReason).toBe("max_output");
    history.push(first, CONTINUE);
    await step(model, history);
    expect(responses.requests[1]!.body.input).toEqual([
      { role: "user", content: "write" },
      { role: "user", content: CONTINUE.content },
    ]);
  });

  it("max_output_tokens after some text: the reasoning goes back with its message item", async () => {
    const model = gpt("responses", responses.url);
    responses.script({ reasoning: true, text: ["Half"], incomplete: "max_output_tokens" }, { text: ["ok"] });
    const history: Message[] = [{ role: "user", content: "write" }];
    const first = await step(model, history);
    expect(first).toMatchObject({ content: "Half", stopReason: "max_output" });
    history.push(first, CONTINUE);
    await step(model, history);
    const input = responses.requests[1]!.body.input as { type?: string }[];
    expect(input.map((item) => item.type ?? "plain")).toEqual(["plain", "reasoning", "message", "plain"]);
  });
});

describe("anthropic thinking: a tool turn that has no thinking block of its own", () => {
  /** An OpenAI chat tool turn: the primary before a fallback to Claude with thinking. */
  const fromOpenAI: Message[] = [
    { role: "user", content: "write a" },
    {
      role: "assistant",
      content: "",
      toolCalls: [{ id: "call_1", name: "write_file", arguments: { path: "a" } }],
      stopReason: "tool_use",
      usage: { inputTokens: 5, outputTokens: 5 },
    },
    { role: "tool", toolCallId: "call_1", name: "write_file", content: "ok", success: true },
  ];

  it("a fallback to Claude with thinking mid tool turn is sent without thinking; the next user turn has it", async () => {
    for (const thinking of [{ type: "enabled", budgetTokens: 2048 }, { type: "adaptive" }]) {
      anthropic.requests.length = 0;
      anthropic.script({ blocks: [{ type: "text", text: "Wrote a." }] });
      const model = claude({ thinking });
      const answer = await step(model, fromOpenAI);
      expect(answer).toMatchObject({ content: "Wrote a.", stopReason: "end_turn" });
      expect(anthropic.requests[0]!.body).not.toHaveProperty("thinking");
    }
    // The turn is over: a new user message gets thinking again.
    anthropic.requests.length = 0;
    const history: Message[] = [
      ...fromOpenAI,
      { role: "assistant", content: "Wrote a.", stopReason: "end_turn" },
      { role: "user", content: "now b" },
    ];
    anthropic.script({ blocks: [{ type: "thinking", thinking: "b next" }, { type: "text", text: "Sure." }] });
    await step(claude(), history);
    expect(anthropic.requests.at(-1)!.body.thinking).toEqual({ type: "enabled", budget_tokens: 2048 });
  });
});

describe("anthropic thinking: a thinking block that never got its signature", () => {
  it("is not kept: the tool turn goes back without it (and without thinking), not refused for its empty signature", async () => {
    anthropic.script(
      {
        blocks: [
          { type: "thinking", thinking: "unsigned thought", signature: null },
          { type: "tool_use", id: "toolu_u", name: "write_file", input: { path: "a" } },
        ],
        stopReason: "tool_use",
      },
      { blocks: [{ type: "text", text: "Done." }] },
    );
    const model = claude();
    const history: Message[] = [{ role: "user", content: "write a" }];
    const first = await step(model, history);
    expect(first).toMatchObject({ stopReason: "tool_use", toolCalls: [{ id: "toolu_u" }] });
    expect(JSON.stringify(first.providerState ?? null)).not.toContain("unsigned thought");
    history.push(first, { role: "tool", toolCallId: "toolu_u", name: "write_file", content: "ok", success: true });
    const second = await step(model, history);
    expect(second).toMatchObject({ content: "Done.", stopReason: "end_turn" });
    const body = anthropic.requests[1]!.body;
    expect(body).not.toHaveProperty("thinking");
    expect(body.messages[1]!.content).toEqual([
      { type: "tool_use", id: "toolu_u", name: "write_file", input: { path: "a" } },
    ]);
  });

  it("a signed block next to it is kept, and the turn keeps thinking", async () => {
    anthropic.script(
      {
        blocks: [
          { type: "thinking", thinking: "signed thought" },
          { type: "thinking", thinking: "unsigned thought", signature: null },
          { type: "tool_use", id: "toolu_s", name: "write_file", input: {} },
        ],
        stopReason: "tool_use",
      },
      { blocks: [{ type: "text", text: "Done." }] },
    );
    const model = claude();
    const history: Message[] = [{ role: "user", content: "write a" }];
    const first = await step(model, history);
    history.push(first, { role: "tool", toolCallId: "toolu_s", name: "write_file", content: "ok", success: true });
    await step(model, history);
    const body = anthropic.requests[1]!.body;
    expect(body.thinking).toEqual({ type: "enabled", budget_tokens: 2048 });
    expect((body.messages[1]!.content as { type: string }[]).map((b) => b.type)).toEqual(["thinking", "tool_use"]);
  });
});
