/**
 * resume-semantics §2–§3 and contracts §13 together, at the provider boundary: the §7.2 crash
 * (two calls in one step, only `a` answered) on a step that carried reasoning, and the cut and
 * output-limit resumes. What a resume appends (planResume) goes to the real SDKs against the
 * local servers that reject what the real services reject (fake-anthropic.ts,
 * fake-openai-responses.ts, fake-openai.ts): the result that arrived is kept, the missing one is
 * answered failed with exactly the §3 text, the reasoning is sent back with the tool turn, and
 * a step cut by a fault sends no reasoning back.
 */
import { describe, expect, it } from "vitest";
import type { Message } from "../src/shared/messages.js";
import { planResume } from "../src/shared/resume-plan.js";
import { signatureOf } from "./support/fake-anthropic.js";
import { useFakeProviders } from "./support/fake-providers.js";
import { claudeAt, gpt, step } from "./support/model-steps.js";

/** resume-semantics.md §3, written out on purpose (not imported). */
const INTERRUPTED_LITERAL =
  "The process stopped while this tool was running, so it may or may not have completed, and whatever it changes may or may not have happened. Check the current state before running it again.";

const fakes = useFakeProviders();

const ask: Message = { role: "user", content: "Write a.txt and b.txt" };
const resultOf = (id: string): Message => ({
  role: "tool",
  toolCallId: id,
  name: "write_file",
  content: `wrote ${id}.txt`,
  success: true,
});

/** §7.2 after the crash: the plan must be recover_tools with exactly `b`; its appends pushed. */
function recover(history: Message[], b: string): void {
  const { point, appends } = planResume(history);
  expect(point.kind).toBe("recover_tools");
  expect(point.unansweredToolCalls.map((c) => c.id)).toEqual([b]);
  expect(appends).toEqual([
    { role: "tool", toolCallId: b, name: "write_file", content: INTERRUPTED_LITERAL, success: false },
  ]);
  history.push(...appends);
}

describe("§7.2 on a step with reasoning", () => {
  it("anthropic: the signed thinking goes back with both calls; a's result kept, b's is_error with the exact text", async () => {
    const thinking = "Two files: a then b.";
    fakes.anthropic.script(
      {
        blocks: [
          { type: "thinking", thinking },
          { type: "tool_use", id: "toolu_a", name: "write_file", input: { name: "a.txt" } },
          { type: "tool_use", id: "toolu_b", name: "write_file", input: { name: "b.txt" } },
        ],
        stopReason: "tool_use",
      },
      { blocks: [{ type: "text", text: "1 tool was interrupted" }] },
    );
    const model = claudeAt(fakes.anthropic.url);
    const history: Message[] = [ask];
    history.push(await step(model, history), resultOf("toolu_a"));
    recover(history, "toolu_b");
    const answer = await step(model, history);
    expect(answer).toMatchObject({ content: "1 tool was interrupted", stopReason: "end_turn" });
    const body = fakes.anthropic.requests[1]!.body as Record<string, unknown> & {
      messages: { role: string; content: Record<string, unknown>[] }[];
    };
    // Thinking stays on: the tool turn starts with its signed thinking block.
    expect(body.thinking).toEqual({ type: "enabled", budget_tokens: 2048 });
    expect(body.messages[1]).toEqual({
      role: "assistant",
      content: [
        { type: "thinking", thinking, signature: signatureOf(thinking) },
        { type: "tool_use", id: "toolu_a", name: "write_file", input: { name: "a.txt" } },
        { type: "tool_use", id: "toolu_b", name: "write_file", input: { name: "b.txt" } },
      ],
    });
    const results = body.messages[2]!.content.map(({ cache_control: _c, ...block }) => block);
    expect(results).toEqual([
      { type: "tool_result", tool_use_id: "toolu_a", content: "wrote toolu_a.txt" },
      { type: "tool_result", tool_use_id: "toolu_b", content: INTERRUPTED_LITERAL, is_error: true },
    ]);
  });

  it("openai responses: the reasoning item goes back before both calls; b's output is the exact text, marked failed", async () => {
    fakes.responses.script(
      {
        reasoning: true,
        functionCalls: [
          { callId: "call_a", name: "write_file", arguments: '{"name":"a.txt"}' },
          { callId: "call_b", name: "write_file", arguments: '{"name":"b.txt"}' },
        ],
      },
      { text: ["1 tool was ", "interrupted"] },
    );
    const model = gpt("responses", fakes.responses.url);
    const history: Message[] = [ask];
    const first = await step(model, history);
    history.push(first, resultOf("call_a"));
    recover(history, "call_b");
    expect(await step(model, history)).toMatchObject({ content: "1 tool was interrupted" });
    const reasoning = (first.providerState!.output as { type: string }[])[0]!;
    expect(reasoning.type).toBe("reasoning");
    expect(fakes.responses.requests[1]!.body.input).toEqual([
      { role: "user", content: ask.content },
      reasoning,
      expect.objectContaining({ type: "function_call", call_id: "call_a" }),
      expect.objectContaining({ type: "function_call", call_id: "call_b" }),
      { type: "function_call_output", call_id: "call_a", output: "wrote call_a.txt" },
      { type: "function_call_output", call_id: "call_b", output: `Error: ${INTERRUPTED_LITERAL}` },
    ]);
  });
});

describe("retry_response and continue_response at the provider", () => {
  it("anthropic: a cut step sends its partial text, no thinking, then the redo instruction as user text", async () => {
    const history: Message[] = [ask, { role: "assistant", content: "I will wri", stopReason: "interrupted" }];
    const { point, appends } = planResume(history);
    expect(point.kind).toBe("retry_response");
    history.push(...appends);
    fakes.anthropic.script({ blocks: [{ type: "text", text: "Redone." }] });
    expect(await step(claudeAt(fakes.anthropic.url), history)).toMatchObject({ content: "Redone." });
    const messages = (fakes.anthropic.requests[0]!.body as { messages: { role: string; content: unknown }[] })
      .messages;
    expect(messages.map((m) => m.role)).toEqual(["user", "assistant", "user"]);
    expect(messages[1]!.content).toEqual([{ type: "text", text: "I will wri" }]);
    const last = messages[2]!.content as { type: string; text: string }[];
    expect(last.map((b) => b.text)).toEqual([(appends[0] as { content: string }).content]);
  });

  it("openai chat: a step cut by the output limit is sent whole, then the instruction to continue", async () => {
    const history: Message[] = [
      ask,
      { role: "assistant", content: "Part one of a long", stopReason: "max_output" },
    ];
    const { point, appends } = planResume(history);
    expect(point.kind).toBe("continue_response");
    history.push(...appends);
    fakes.chat.enqueue({ text: [" answer."] });
    expect(await step(gpt("chat", fakes.chat.url), history)).toMatchObject({ content: " answer." });
    const sent = (fakes.chat.requests[0]!.body as { messages: unknown[] }).messages;
    expect(sent.slice(1)).toEqual([
      { role: "user", content: ask.content },
      { role: "assistant", content: "Part one of a long" },
      { role: "user", content: (appends[0] as { content: string }).content },
    ]);
  });
});
