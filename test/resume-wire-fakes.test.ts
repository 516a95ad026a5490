/**
 * The resumes of resume-wire-validity.test.ts with steps the real adapters produced: each
 * interrupted step is a real answer of a fake server (its stored provider state as the stream
 * reader wrote it: signed thinking, encrypted reasoning), the resume is planned as the worker
 * plans it, and the next step goes to the same model, or to a fallback of the other provider.
 * Every request each fake received — not only the one a test looks at — is held to the
 * providers' documented rules (wire-validators.ts), on top of what the fakes refuse themselves.
 */
import { afterEach, describe, expect, it } from "vitest";
import type { Message } from "../src/shared/messages.js";
import { closeUnansweredToolCalls, planResume } from "../src/shared/resume-plan.js";
import { useFakeProviders } from "./support/fake-providers.js";
import { claudeAt, gpt, step } from "./support/model-steps.js";
import { anthropicViolations, chatViolations, responsesViolations } from "./support/wire-validators.js";

const fakes = useFakeProviders();

afterEach(() => {
  const violations = [
    ...fakes.anthropic.requests.flatMap((r) => anthropicViolations(r.body)),
    ...fakes.chat.requests.flatMap((r) => chatViolations(r.body)),
    ...fakes.responses.requests.flatMap((r) => responsesViolations(r.body)),
  ];
  expect(violations).toEqual([]);
});

const ask = (content: string): Message => ({ role: "user", content });
const result = (id: string): Message => ({
  role: "tool",
  toolCallId: id,
  name: "write_file",
  content: "ok",
  success: true,
});

/** The history resumed as the worker resumes it: the plan's appends. */
function resumed(history: Message[], kind: string): Message[] {
  const { point, appends } = planResume(history);
  expect(point.kind).toBe(kind);
  return [...history, ...appends];
}

const claude = () => claudeAt(fakes.anthropic.url);
const chat = () => gpt("chat", fakes.chat.url);
const responses = () => gpt("responses", fakes.responses.url);

/** Each model the next step may go to, with the scripting of a plain answer "Done.". */
const NEXT = {
  claude: () => {
    fakes.anthropic.script({ blocks: [{ type: "text", text: "Done." }] });
    return claude();
  },
  chat: () => {
    fakes.chat.enqueue({ text: ["Done."] });
    return chat();
  },
  responses: () => {
    fakes.responses.script({ text: ["Done."] });
    return responses();
  },
};

describe.each(Object.entries(NEXT))("then to %s", (_name, next) => {
  it("claude thought and asked for two calls, one answered, then a crash: recover_tools", async () => {
    fakes.anthropic.script({
      blocks: [
        { type: "thinking", thinking: "Both files." },
        { type: "tool_use", id: "toolu_a", name: "write_file", input: { path: "a" } },
        { type: "tool_use", id: "toolu_b", name: "write_file", input: { path: "b" } },
      ],
      stopReason: "tool_use",
    });
    const history: Message[] = [ask("write a and b")];
    history.push(await step(claude(), history), result("toolu_a"));
    expect(await step(next(), resumed(history, "recover_tools"))).toMatchObject({ content: "Done." });
    const input = [...history, ...closeUnansweredToolCalls(history), ask("and c")];
    expect(await step(next(), input)).toMatchObject({ content: "Done." });
  });

  it("claude thought, then max_tokens cut its text: continue_response", async () => {
    fakes.anthropic.script({
      blocks: [
        { type: "thinking", thinking: "A long one." },
        { type: "text", text: "Part one, " },
      ],
      stopReason: "max_tokens",
    });
    const history: Message[] = [ask("explain")];
    history.push(await step(claude(), history));
    expect(await step(next(), resumed(history, "continue_response"))).toMatchObject({ content: "Done." });
  });

  it("claude thought, then paused (pause_turn), the pause limit reached: call_model on the paused turn", async () => {
    fakes.anthropic.script({
      blocks: [
        { type: "thinking", thinking: "Search first." },
        { type: "text", text: "Searching. " },
      ],
      stopReason: "pause_turn",
    });
    const history: Message[] = [ask("search")];
    history.push(await step(claude(), history));
    expect(await step(next(), resumed(history, "call_model"))).toMatchObject({ content: "Done." });
  });

  it("claude's stream cut in its tool call: retry_response", async () => {
    fakes.anthropic.script({
      blocks: [
        { type: "thinking", thinking: "Write a." },
        { type: "text", text: "Writing a." },
        { type: "tool_use", id: "toolu_a", name: "write_file", input: { path: "a" } },
      ],
      stopReason: "tool_use",
      cutAfterEvents: 9,
    });
    const history: Message[] = [ask("write a")];
    history.push(await step(claude(), history));
    expect(await step(next(), resumed(history, "retry_response"))).toMatchObject({ content: "Done." });
  });

  it("o-series reasoned and asked for two calls, one answered, then a crash: recover_tools", async () => {
    fakes.responses.script({
      reasoning: true,
      functionCalls: [
        { callId: "call_a", name: "write_file", arguments: '{"path":"a"}' },
        { callId: "call_b", name: "write_file", arguments: '{"path":"b"}' },
      ],
    });
    const history: Message[] = [ask("write a and b")];
    history.push(await step(responses(), history), result("call_a"));
    expect(await step(next(), resumed(history, "recover_tools"))).toMatchObject({ content: "Done." });
    const input = [...history, ...closeUnansweredToolCalls(history), ask("and c")];
    expect(await step(next(), input)).toMatchObject({ content: "Done." });
  });

  it("o-series reasoned, then max_output_tokens cut its text: continue_response", async () => {
    fakes.responses.script({ reasoning: true, text: ["Part one, "], incomplete: "max_output_tokens" });
    const history: Message[] = [ask("explain")];
    history.push(await step(responses(), history));
    expect(await step(next(), resumed(history, "continue_response"))).toMatchObject({ content: "Done." });
  });

  it("chat asked for two calls, one answered, then a crash; and a later answer cut by length", async () => {
    fakes.chat.enqueue(
      {
        toolCalls: [
          // Ids of their own: the Responses fake remembers which reasoning came with "call_a".
          { id: "call_chat_a", name: "write_file", arguments: '{"path":"a"}' },
          { id: "call_chat_b", name: "write_file", arguments: '{"path":"b"}' },
        ],
        finishReason: "tool_calls",
      },
      { text: ["Wrote a, "], finishReason: "length" },
    );
    const history: Message[] = [ask("write a and b")];
    history.push(await step(chat(), history), result("call_chat_a"));
    const recovered = resumed(history, "recover_tools");
    recovered.push(await step(chat(), recovered));
    expect(await step(next(), resumed(recovered, "continue_response"))).toMatchObject({ content: "Done." });
  });
});

describe("a call another provider's model named as no tool is named (answered as unavailable)", () => {
  // Kimi's `functions.write_file`, a channel marker leaked into the name, a name of 100
  // characters: the fleet answers the call "no tool named … is available" and keeps it.
  const BAD = ["functions.write_file", "write_file<|channel|>commentary", `t${"x".repeat(99)}`];

  it.each(BAD)(
    "%s: a fallback to Claude (resume, then new input) goes on, the call renamed",
    async (name) => {
      fakes.chat.enqueue({
        toolCalls: [{ id: "call_n1", name, arguments: '{"path":"a"}' }],
        finishReason: "tool_calls",
      });
      const history: Message[] = [ask("write a")];
      const first = await step(chat(), history);
      expect(first.toolCalls).toMatchObject([{ name }]);
      history.push(first, {
        role: "tool",
        toolCallId: "call_n1",
        name,
        content: `no tool named "${name}" is available to this agent`,
        success: false,
      });
      expect(await step(NEXT.claude(), resumed(history, "call_model"))).toMatchObject({ content: "Done." });
      expect(await step(NEXT.claude(), [...history, ask("and b")])).toMatchObject({ content: "Done." });
      const sent = fakes.anthropic.requests.map((r) => r.body.messages[1]!.content as { name?: string }[]);
      expect(sent[0]![0]!.name).toMatch(/^[a-zA-Z0-9_-]{1,64}$/);
      // The same name every time: the prompt cache holds from one request to the next.
      expect(sent[1]![0]!.name).toBe(sent[0]![0]!.name);
    },
  );
});
