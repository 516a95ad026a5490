/**
 * Agent settings a provider refuses at every request: each is refused when the agent is
 * created (a 400 naming the field: parseAgentConfig is what the API, a batch line and a
 * stored agent all go through), where before every run of such an agent failed. The fakes
 * (test/support) refuse each as the API does, so each case shows the rule too.
 */
import { describe, expect, it } from "vitest";
import { assertToolsFit, type ModelConfig, parseAgentConfig } from "../src/shared/agent-config.js";
import { ValidationError } from "../src/shared/errors.js";
import type { Message } from "../src/shared/messages.js";
import { callModel } from "../src/worker/call-model.js";
import { OpenAIModel } from "../src/worker/models/openai.js";
import { toOpenAITools } from "../src/worker/models/openai-request.js";
import type { ToolSpec } from "../src/worker/models/provider.js";
import { useFakeProviders } from "./support/fake-providers.js";
import { gpt, noSleep, req, step } from "./support/model-steps.js";

const fakes = useFakeProviders();

/** The ValidationError `parseAgentConfig` throws for `agent`, or null. */
function refusal(agent: unknown): ValidationError | null {
  try {
    parseAgentConfig(agent);
    return null;
  } catch (error) {
    if (error instanceof ValidationError) return error;
    throw error;
  }
}

describe("maxTokens below 16 with the Responses API", () => {
  const responses = (maxTokens: number) => ({
    provider: "openai",
    model: "gpt-test",
    api: "responses",
    maxTokens,
  });

  it("is what the API refuses at every request", async () => {
    const model = new OpenAIModel(
      { provider: "openai", model: "gpt-test", baseUrl: fakes.responses.url, api: "responses", maxTokens: 8 },
      { keyless: true },
    );
    await expect(step(model, [{ role: "user", content: "hi" }])).rejects.toThrow(
      /max_output_tokens.*below minimum value/,
    );
    fakes.responses.script({ text: ["ok"] });
    const at16 = new OpenAIModel({ ...model.config, maxTokens: 16 }, { keyless: true });
    expect(await step(at16, [{ role: "user", content: "hi" }])).toMatchObject({ content: "ok" });
  });

  it("is refused at creation, naming the field, for the model and a fallback", () => {
    const error = refusal({ model: responses(8) });
    expect(error?.message).toMatch(/^agent\.model\.maxTokens: must be at least 16 with "api": "responses"/);
    expect(refusal({ model: responses(16) })).toBeNull();
    expect(
      refusal({ model: { provider: "scripted", steps: [{ text: "x" }] }, fallbackModels: [responses(15)] })
        ?.message,
    ).toMatch(/^agent\.fallbackModels\[0\]\.maxTokens: must be at least 16/);
  });

  it("chat completions take any positive maxTokens", () => {
    expect(refusal({ model: { provider: "openai", model: "gpt-test", maxTokens: 1 } })).toBeNull();
  });
});

/** A tool whose operator wrote a long description (an MCP server's, a generated one). */
const longTool = (length: number): ToolSpec => ({
  name: "search_docs",
  description: `Search the docs. ${"x".repeat(length)}`.slice(0, length),
  parameters: { type: "object", properties: {} },
});

describe("a tool description over 1,024 characters, to OpenAI", () => {
  const history: Message[] = [{ role: "user", content: "find it" }];
  const ask = (api: "chat" | "responses", tools: ToolSpec[]) =>
    callModel(
      gpt(api, api === "chat" ? fakes.chat.url : fakes.responses.url),
      { ...req(history), tools },
      { sleep: noSleep, policy: { maxAttempts: 1, baseDelayMs: 1, maxDelayMs: 1 } },
    );

  it.each(["chat", "responses"] as const)(
    "%s: goes out cut to 1,024 characters, and the run goes on",
    async (api) => {
      if (api === "chat") fakes.chat.enqueue({ text: ["Found."] });
      else fakes.responses.script({ text: ["Found."] });
      const tool = longTool(3000);
      const step = await ask(api, [tool]);
      expect(step).toMatchObject({ ok: true, message: { content: "Found." } });
      const sent =
        api === "chat"
          ? (fakes.chat.requests[0]!.body.tools[0].function.description as string)
          : (fakes.responses.requests[0]!.body.tools[0].description as string);
      expect(sent).toBe(tool.description.slice(0, 1024));
    },
  );

  it("a description of 1,024 characters goes out whole", async () => {
    fakes.chat.enqueue({ text: ["Found."] });
    const tool = longTool(1024);
    expect(await ask("chat", [tool])).toMatchObject({ ok: true });
    expect(fakes.chat.requests[0]!.body.tools[0].function.description).toBe(tool.description);
  });

  it("is never cut inside a surrogate pair", () => {
    const description = `${"x".repeat(1023)}😀 more`;
    const [sent] = toOpenAITools([{ ...longTool(10), description }]);
    expect(sent).toMatchObject({ function: { description: "x".repeat(1023) } });
  });
});

describe("more than 128 tools with OpenAI chat completions", () => {
  const tools = (n: number) => Array.from({ length: n }, (_, i) => `tool_${i}`);
  const chat = { provider: "openai", model: "gpt-test" };

  it("is what the API refuses at every request", async () => {
    const specs = tools(129).map((name) => ({ ...longTool(10), name }));
    const refused = await callModel(
      gpt("chat", fakes.chat.url),
      { ...req([{ role: "user", content: "hi" }]), tools: specs },
      { sleep: noSleep, policy: { maxAttempts: 1, baseDelayMs: 1, maxDelayMs: 1 } },
    );
    expect(refused).toMatchObject({
      ok: false,
      rejected: true,
      error: expect.stringMatching(/array too long/),
    });
  });

  it("is refused at creation, naming agent.tools, for the model and a fallback", () => {
    expect(refusal({ model: chat, tools: tools(129) })?.message).toMatch(
      /^agent\.tools: lists 129 tools; OpenAI chat completions take at most 128 \(agent\.model\)/,
    );
    expect(
      refusal({ model: { provider: "anthropic", model: "c" }, tools: tools(129), fallbackModels: [chat] })
        ?.message,
    ).toMatch(/^agent\.tools: .*\(agent\.fallbackModels\[0\]\)/);
    expect(refusal({ model: chat, tools: tools(128) })).toBeNull();
    expect(refusal({ model: { provider: "anthropic", model: "c" }, tools: tools(129) })).toBeNull();
  });

  it("a resume's model is held to it too (POST …/resume {model}: a 400 naming model)", () => {
    const agent = { tools: tools(129) };
    expect(() => assertToolsFit(chat as ModelConfig, agent, "model")).toThrow(
      /^model: OpenAI chat completions take at most 128 tools; the session's agent lists 129$/,
    );
    expect(() => assertToolsFit({ provider: "anthropic", model: "c" }, agent, "model")).not.toThrow();
    expect(() => assertToolsFit(chat as ModelConfig, { tools: tools(128) }, "model")).not.toThrow();
  });

  it("a compatible server at a raw baseUrl is not held to it", () => {
    expect(
      refusal({ model: { ...chat, baseUrl: "http://127.0.0.1:8000/v1" }, tools: tools(200) }),
    ).toBeNull();
  });
});

describe("a tool whose parameters schema has no type (a tool without arguments: `parameters: {}`)", () => {
  // Anthropic's request gives input_schema `type: "object"` itself; OpenAI refuses a function
  // schema that is not of type object, so every run of an agent listing such a tool failed.
  const bare: ToolSpec = { name: "now", description: "The time.", parameters: {} };

  it.each(["chat", "responses"] as const)(
    "%s: goes out as an object schema, and the run goes on",
    async (api) => {
      if (api === "chat") fakes.chat.enqueue({ text: ["Noon."] });
      else fakes.responses.script({ text: ["Noon."] });
      const step = await callModel(
        gpt(api, api === "chat" ? fakes.chat.url : fakes.responses.url),
        { ...req([{ role: "user", content: "time?" }]), tools: [bare] },
        { sleep: noSleep, policy: { maxAttempts: 1, baseDelayMs: 1, maxDelayMs: 1 } },
      );
      expect(step).toMatchObject({ ok: true, message: { content: "Noon." } });
      const sent =
        api === "chat"
          ? fakes.chat.requests[0]!.body.tools[0].function.parameters
          : fakes.responses.requests[0]!.body.tools[0].parameters;
      expect(sent).toEqual({ type: "object", properties: {} });
    },
  );
});
