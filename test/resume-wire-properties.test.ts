/**
 * resume-wire-validity.test.ts over random sessions: a session of a few steps — each with any
 * stop reason, text that may be empty or whitespace, up to three calls whose ids and names
 * another provider may have minted, the provider state a step of Claude (signed thinking,
 * redacted thinking, text, tool_use blocks, in the order the API gives them; a thinking block
 * left unsigned where max_tokens cut it) or of an OpenAI reasoning model (reasoning items before
 * the message or call they led to) may carry, some of its calls answered and the rest closed as
 * the worker closes them, and user or internal messages between — then resumed as the worker
 * resumes it, or given new input. Each request the four targets' builders make of it must
 * keep the providers' documented rules (wire-validators.ts).
 *
 * Left out on purpose: a user message of whitespace only as the first or last message. The
 * Anthropic request leaves such a text out of a turn that has other content, and keeps it as
 * the last turn's only content so that the provider's 400 names it (anthropic-messages.ts).
 */
import fc from "fast-check";
import { expect, it } from "vitest";
import type { AssistantMessage, Message } from "../src/shared/messages.js";
import { closeUnansweredToolCalls, planResume } from "../src/shared/resume-plan.js";
import { resumePoint } from "../src/shared/resume-point.js";
import { anthropicTarget, buildAnthropicRequest } from "../src/worker/models/anthropic-request.js";
import { buildChatBody } from "../src/worker/models/openai-request.js";
import { buildResponsesBody } from "../src/worker/models/openai-responses-request.js";
import { targetOf } from "../src/worker/models/provider-state.js";
import { req } from "./support/model-steps.js";
import { anthropicViolations, chatViolations, responsesViolations } from "./support/wire-validators.js";

const CLAUDE_URL = "https://claude.test";
const OPENAI_URL = "https://openai.test/v1";
const claude = { provider: "anthropic" as const, model: "c", baseUrl: CLAUDE_URL, maxTokens: 8000 };
const thinking = { ...claude, thinking: { type: "enabled" as const, budgetTokens: 2048 } };
const adaptive = { ...claude, thinking: { type: "adaptive" as const } };
const claudeTarget = anthropicTarget(claude);
const responsesTarget = targetOf("openai", "responses", { baseUrl: OPENAI_URL }, OPENAI_URL);

const TARGETS: Record<string, (history: Message[]) => string[]> = {
  "anthropic, thinking enabled": (h) => anthropicViolations(buildAnthropicRequest(thinking, req(h)) as never),
  "anthropic, thinking adaptive": (h) =>
    anthropicViolations(buildAnthropicRequest(adaptive, req(h)) as never),
  "anthropic, thinking off": (h) => anthropicViolations(buildAnthropicRequest(claude, req(h)) as never),
  "openai chat": (h) => chatViolations(buildChatBody({ provider: "openai", model: "g" }, req(h)) as never),
  "openai responses": (h) =>
    responsesViolations(buildResponsesBody({ model: "o" }, req(h), responsesTarget) as never),
};

const stepText = fc.constantFrom("", " ", "\n", "hello", "hello ", "a\n\n");
const firstText = fc.constantFrom("hello", "hello ", "a\n\n");
const laterText = fc.constantFrom("hello", " ", "\n", "x ");
const callId = fc.constantFrom(
  "a",
  "b",
  "call_1",
  "toolu_1",
  "functions.write_file:0",
  "x".repeat(70),
  "id with space",
);
const callName = fc.constantFrom("write_file", "write_file", "functions.write_file", `t${"x".repeat(99)}`);

/** Claude's blocks, in the API's order: thinking first, then text, then tool_use. */
const claudeBlocks = fc
  .tuple(
    fc.array(fc.constantFrom("thinking", "redacted_thinking"), { maxLength: 2 }),
    fc.array(fc.constantFrom("text", "whitespace"), { maxLength: 2 }),
    fc.nat(2),
    fc.boolean(),
  )
  .map(([thoughts, texts, uses, cutInThought]) =>
    // max_tokens in the middle of a thought: its block is the last, and unsigned.
    cutInThought && thoughts.length > 0 && texts.length === 0 && uses === 0
      ? [...thoughts.slice(0, -1), "unsigned"]
      : [...thoughts, ...texts, ...Array<string>(uses).fill("tool_use")],
  );

/** A reasoning model's output items: reasoning before what it led to (or alone: cut by max_output_tokens). */
const responsesItems = fc
  .array(fc.tuple(fc.boolean(), fc.constantFrom("message", "function_call", "none")), { maxLength: 3 })
  .map((parts) =>
    parts.flatMap(([reasoned, kind]) => [
      ...(reasoned ? ["reasoning"] : []),
      ...(kind === "none" ? [] : [kind]),
    ]),
  );

const stepArb = fc.record({
  content: stepText,
  stopReason: fc.constantFrom(
    "end_turn",
    "tool_use",
    "max_output",
    "interrupted",
    "paused",
    "refusal",
    "context_full",
  ),
  calls: fc.uniqueArray(fc.tuple(callId, callName), { maxLength: 3, selector: ([id]) => id }),
  state: fc.oneof(
    fc.constant(undefined),
    claudeBlocks.map((kinds) => ({ claude: kinds })),
    responsesItems.map((kinds) => ({ responses: kinds })),
  ),
  answered: fc.array(fc.boolean(), { minLength: 3, maxLength: 3 }),
  after: fc.option(fc.tuple(laterText, fc.constantFrom("user" as const, "internal" as const))),
});
type StepShape = fc.Arbitrary<typeof stepArb extends fc.Arbitrary<infer T> ? T : never>;
type Step = StepShape extends fc.Arbitrary<infer T> ? T : never;

let n = 0;
function claudeBlock(kind: string): Record<string, unknown> {
  n++;
  switch (kind) {
    case "thinking":
      return { type: "thinking", thinking: `t${n}`, signature: `s${n}` };
    case "unsigned":
      return { type: "thinking", thinking: `t${n}`, signature: "" };
    case "redacted_thinking":
      return { type: "redacted_thinking", data: `d${n}` };
    case "text":
      return { type: "text", text: `w${n}` };
    case "whitespace":
      return { type: "text", text: "\n\n" };
    default:
      return { type: "tool_use", id: `toolu_${n}`, name: "write_file", input: {} };
  }
}
function responsesItem(kind: string): Record<string, unknown> {
  n++;
  if (kind === "reasoning")
    return { type: "reasoning", id: `rs_${n}`, summary: [], encrypted_content: `e${n}` };
  if (kind === "message")
    return {
      type: "message",
      id: `msg_${n}`,
      role: "assistant",
      status: "completed",
      content: [{ type: "output_text", text: `w${n}`, annotations: [] }],
    };
  return { type: "function_call", id: `fc_${n}`, call_id: `call_${n}`, name: "write_file", arguments: "{}" };
}

function assistant(step: Step): AssistantMessage {
  const message: AssistantMessage = { role: "assistant", content: step.content, stopReason: step.stopReason };
  if (step.calls.length > 0)
    message.toolCalls = step.calls.map(([id, name]) => ({ id, name, arguments: {} }));
  if (step.state && "claude" in step.state)
    message.providerState = { ...claudeTarget, content: step.state.claude.map(claudeBlock) };
  else if (step.state)
    message.providerState = { ...responsesTarget, output: step.state.responses.map(responsesItem) };
  return message;
}

/** The session the steps make, as the worker would have stored it. */
function session(first: string, steps: Step[]): Message[] {
  const history: Message[] = [{ role: "user", content: first }];
  for (const step of steps) {
    history.push(...closeUnansweredToolCalls(history), assistant(step));
    const point = resumePoint(history);
    if (point.resumable && point.kind === "recover_tools")
      point.unansweredToolCalls.forEach((call, i) => {
        if (step.answered[i])
          history.push({
            role: "tool",
            toolCallId: call.id,
            name: call.name,
            content: i ? "ok" : "\n",
            success: i !== 2,
          });
      });
    if (step.after)
      history.push(...closeUnansweredToolCalls(history), { role: step.after[1], content: step.after[0] });
  }
  return history;
}

it("every resume and every new input of a random session makes requests the providers take", () => {
  const broken: { target: string; rules: string[]; history: Message[] }[] = [];
  fc.assert(
    fc.property(
      firstText,
      fc.array(stepArb, { minLength: 1, maxLength: 4 }),
      fc.boolean(),
      (first, steps, input) => {
        const history = session(first, steps);
        let sent: Message[];
        if (input)
          sent = [...history, ...closeUnansweredToolCalls(history), { role: "user", content: "go on" }];
        else {
          // A whitespace message last is left out on purpose (see the file comment).
          const last = history.at(-1)!;
          if (last.role !== "assistant" && last.role !== "tool" && last.content.trim() === "") return;
          const point = resumePoint(history);
          if (!point.resumable) return;
          sent = [...history, ...planResume(history).appends];
        }
        for (const [target, violations] of Object.entries(TARGETS)) {
          const rules = violations(sent);
          if (rules.length > 0 && broken.length < 3) broken.push({ target, rules, history: sent });
        }
      },
    ),
    { numRuns: 3_000, seed: 20261207 },
  );
  expect(broken).toEqual([]);
});
