/**
 * Would the real providers take every request a resume sends? Each history a crash, a cut, a
 * cancel or a park leaves (resume-semantics.md §2–§3) is resumed as the worker resumes it
 * (`planResume`, or `closeUnansweredToolCalls` then the new user message), built into a
 * request by each adapter's own builder — Anthropic with thinking on and off, OpenAI chat,
 * OpenAI Responses — and held to the providers' documented rules (wire-validators.ts). A
 * request that breaks one is refused with a 400 at every retry and every resume: the session
 * parks, and only production would show it, since the fakes check only what they were taught.
 */
import { describe, expect, it } from "vitest";
import type { AssistantMessage, Message } from "../src/shared/messages.js";
import {
  CANCELLED_BEFORE_START_TEXT,
  closeUnansweredToolCalls,
  planResume,
} from "../src/shared/resume-plan.js";
import { anthropicTarget, buildAnthropicRequest } from "../src/worker/models/anthropic-request.js";
import { buildChatBody } from "../src/worker/models/openai-request.js";
import { buildResponsesBody } from "../src/worker/models/openai-responses-request.js";
import { targetOf } from "../src/worker/models/provider-state.js";
import { CRASH_HISTORY } from "./support/histories.js";
import { req } from "./support/model-steps.js";
import { anthropicViolations, chatViolations, responsesViolations } from "./support/wire-validators.js";

const CLAUDE_URL = "https://claude.test";
const OPENAI_URL = "https://openai.test/v1";
const claudeThinking = {
  provider: "anthropic" as const,
  model: "claude-test",
  baseUrl: CLAUDE_URL,
  maxTokens: 8000,
  thinking: { type: "enabled" as const, budgetTokens: 2048 },
};
const claudePlain = {
  provider: "anthropic" as const,
  model: "claude-test",
  baseUrl: CLAUDE_URL,
  maxTokens: 8000,
};
const claudeTarget = anthropicTarget(claudeThinking);
const responsesTarget = targetOf("openai", "responses", { baseUrl: OPENAI_URL }, OPENAI_URL);

/** A signed thinking block, as the API sent it. */
const thought = (text: string) => ({ type: "thinking", thinking: text, signature: `sig_${text.length}` });
const claudeState = (...content: Record<string, unknown>[]) => ({ ...claudeTarget, content });
const responsesState = (...output: Record<string, unknown>[]) => ({ ...responsesTarget, output });
const reasoning = (id: string) => ({ type: "reasoning", id, summary: [], encrypted_content: `enc_${id}` });

const call = (id: string, path = `${id}.txt`) => ({ id, name: "write_file", arguments: { path } });
const ask = (content: string): Message => ({ role: "user", content });
const result = (id: string, content = "ok", success = true): Message => ({
  role: "tool",
  toolCallId: id,
  name: "write_file",
  content,
  success,
});
const stepOf = (fields: Partial<AssistantMessage>): AssistantMessage => ({
  role: "assistant",
  content: "",
  stopReason: "tool_use",
  ...fields,
});

/** Stored histories the resume states leave, by name (what the session holds before resume). */
const HISTORIES: Record<string, Message[]> = {
  "one tool call interrupted": [ask("write a"), stepOf({ toolCalls: [call("a")] })],
  "parallel calls, one answered (spec §7.2)": CRASH_HISTORY,
  "three parallel calls, the middle one answered": [
    ask("write a, b, c"),
    stepOf({ content: "Writing three files.", toolCalls: [call("a"), call("b"), call("c")] }),
    result("b"),
  ],
  "a cut-off answer (interrupted)": [
    ask("explain"),
    stepOf({ content: "The answer is", stopReason: "interrupted" }),
  ],
  "a cut-off answer with a half tool call": [
    ask("write a"),
    stepOf({ content: "Let me", toolCalls: [call("a")], stopReason: "interrupted" }),
  ],
  "a cut-off answer that streamed only newlines": [
    ask("explain"),
    stepOf({ content: "\n\n", stopReason: "interrupted" }),
  ],
  "a truncated answer (max_output)": [
    ask("explain"),
    stepOf({ content: "Part one. ", stopReason: "max_output" }),
  ],
  "a truncated answer that was only a half tool call": [
    ask("write a"),
    stepOf({ toolCalls: [call("a")], stopReason: "max_output" }),
  ],
  "a truncated answer after a tool loop": [
    ask("write a"),
    stepOf({ toolCalls: [call("a")] }),
    result("a"),
    stepOf({ content: "Wrote a, and", stopReason: "max_output" }),
  ],
  "thinking + tool_use, then a crash (claude state)": [
    ask("write a and b"),
    stepOf({
      content: "Writing.",
      toolCalls: [call("toolu_a"), call("toolu_b")],
      providerState: claudeState(
        thought("I will write both."),
        { type: "text", text: "Writing." },
        { type: "tool_use", id: "toolu_a", name: "write_file", input: {} },
        { type: "tool_use", id: "toolu_b", name: "write_file", input: {} },
      ),
    }),
    result("toolu_a"),
  ],
  "thinking + tool_use answered, then a cut step without thinking (claude state)": [
    ask("write a"),
    stepOf({
      toolCalls: [call("toolu_a")],
      providerState: claudeState(thought("Write a."), {
        type: "tool_use",
        id: "toolu_a",
        name: "write_file",
        input: {},
      }),
    }),
    result("toolu_a"),
    stepOf({ content: "Done wri", stopReason: "interrupted" }),
  ],
  "reasoning + function calls, then a crash (responses state)": [
    ask("write a and b"),
    stepOf({
      toolCalls: [call("call_a"), call("call_b")],
      providerState: responsesState(
        reasoning("rs_1"),
        { type: "function_call", id: "fc_a", call_id: "call_a", name: "write_file", arguments: "{}" },
        { type: "function_call", id: "fc_b", call_id: "call_b", name: "write_file", arguments: "{}" },
      ),
    }),
    result("call_a"),
  ],
  "reasoning then max_output while reasoning (responses state)": [
    ask("explain"),
    stepOf({ stopReason: "max_output", providerState: responsesState(reasoning("rs_1")) }),
  ],
  "a cancelled call (answered as cancelled), the next model call never made": [
    ask("write a and b"),
    stepOf({ toolCalls: [call("a"), call("b")] }),
    result("a", "Cancelled while running: aborted", false),
    result("b", CANCELLED_BEFORE_START_TEXT, false),
  ],
  "a paused step at the pause limit (claude state, thinking)": [
    ask("search"),
    stepOf({
      content: "Searching. ",
      stopReason: "paused",
      providerState: claudeState(thought("Search the web."), { type: "text", text: "Searching. " }),
    }),
  ],
  "a paused step without thinking": [
    ask("search"),
    stepOf({ content: "Searching.\n", stopReason: "paused" }),
  ],
  "a call named as no tool is (another provider's model), answered as unavailable": [
    ask("write a"),
    stepOf({ toolCalls: [{ id: "functions.write_file:0", name: "functions.write_file", arguments: {} }] }),
    {
      role: "tool",
      toolCallId: "functions.write_file:0",
      name: "functions.write_file",
      content: 'no tool named "functions.write_file" is available to this agent',
      success: false,
    },
  ],
  "kimi-style ids repeated per turn, the second turn interrupted": [
    ask("write a"),
    stepOf({ toolCalls: [call("functions.write_file:0")] }),
    result("functions.write_file:0"),
    stepOf({ content: "Now b.", toolCalls: [call("functions.write_file:0", "b.txt")] }),
  ],
};

/** The history each way the worker goes on from `stored`: each resumable resume, and new input. */
function continuations(stored: Message[]): [string, Message[]][] {
  const out: [string, Message[]][] = [];
  try {
    const { point, appends } = planResume(stored);
    out.push([`resume (${point.kind})`, [...stored, ...appends]]);
  } catch {
    // Nothing to resume (a paused step below its limit is one): new input only.
  }
  out.push(["new user message", [...stored, ...closeUnansweredToolCalls(stored), ask("go on")]]);
  return out;
}

const TARGETS = {
  "anthropic, thinking on": (history: Message[]) =>
    anthropicViolations(buildAnthropicRequest(claudeThinking, req(history)) as never),
  "anthropic, thinking off": (history: Message[]) =>
    anthropicViolations(buildAnthropicRequest(claudePlain, req(history)) as never),
  "openai chat": (history: Message[]) =>
    chatViolations(buildChatBody({ provider: "openai", model: "gpt-test" }, req(history)) as never),
  "openai responses": (history: Message[]) =>
    responsesViolations(buildResponsesBody({ model: "o4-test" }, req(history), responsesTarget) as never),
};

describe.each(Object.entries(TARGETS))("to %s", (_target, violations) => {
  const cases = Object.entries(HISTORIES).flatMap(([name, stored]) =>
    continuations(stored).map(([how, history]) => [`${name}: ${how}`, history] as const),
  );
  it.each(cases)("%s: a request the provider takes", (_name, history) => {
    expect(violations(history)).toEqual([]);
  });
});
