/**
 * The validators of the providers' request rules (support/wire-validators.ts) that the fakes
 * and the resume tests rely on: each rule found broken in a body that breaks it, and a body
 * the providers take found clean — so a resume test that passes says the request is good, not
 * that the validator could not see the problem.
 */
import { describe, expect, it } from "vitest";
import { anthropicViolations, chatViolations, responsesViolations } from "./support/wire-validators.js";

const toolUse = (id: string, name = "write_file") => ({ type: "tool_use", id, name, input: {} });
const toolResult = (id: string) => ({ type: "tool_result", tool_use_id: id, content: "ok" });
const thinking = { type: "thinking", thinking: "t", signature: "s" };
const claude = (messages: unknown[], extra: Record<string, unknown> = {}) => ({
  model: "c",
  max_tokens: 8000,
  messages,
  ...extra,
});
const THINKING = { thinking: { type: "enabled", budget_tokens: 2048 } };

describe("anthropicViolations", () => {
  it("a tool turn answered in the next message, results first, is clean", () => {
    const body = claude(
      [
        { role: "user", content: "go" },
        { role: "assistant", content: [thinking, toolUse("a"), toolUse("b")] },
        { role: "user", content: [toolResult("a"), toolResult("b"), { type: "text", text: "and c" }] },
      ],
      THINKING,
    );
    expect(anthropicViolations(body)).toEqual([]);
  });

  it.each([
    ["no messages", claude([]), "at least one message"],
    [
      "a tool_use unanswered",
      claude([
        { role: "user", content: "go" },
        { role: "assistant", content: [toolUse("a"), toolUse("b")] },
        { role: "user", content: [toolResult("a")] },
      ]),
      "without tool_result blocks immediately after: b",
    ],
    [
      "a result after text",
      claude([
        { role: "user", content: "go" },
        { role: "assistant", content: [toolUse("a")] },
        { role: "user", content: [{ type: "text", text: "x" }, toolResult("a")] },
      ]),
      "must come first",
    ],
    [
      "a result answering no call of the message before",
      claude([
        { role: "user", content: "go" },
        { role: "assistant", content: [{ type: "text", text: "hi" }] },
        { role: "user", content: [toolResult("a")] },
      ]),
      "unexpected tool_use_id",
    ],
    [
      "a whitespace text",
      claude([{ role: "user", content: [{ type: "text", text: "\n" }] }]),
      "non-whitespace",
    ],
    [
      "an unsigned thinking block",
      claude([
        { role: "user", content: "go" },
        { role: "assistant", content: [{ type: "thinking", thinking: "t", signature: "" }, toolUse("a")] },
        { role: "user", content: [toolResult("a")] },
      ]),
      "without its signature",
    ],
    [
      "thinking on, the tool turn without thinking",
      claude(
        [
          { role: "user", content: "go" },
          { role: "assistant", content: [toolUse("a")] },
          { role: "user", content: [toolResult("a")] },
        ],
        THINKING,
      ),
      "must start with a thinking block",
    ],
    [
      "a prefill ending in whitespace",
      claude([
        { role: "user", content: "go" },
        { role: "assistant", content: [{ type: "text", text: "So " }] },
      ]),
      "trailing whitespace",
    ],
    [
      "a prefill without its thinking, thinking on",
      claude(
        [
          { role: "user", content: "go" },
          { role: "assistant", content: [{ type: "text", text: "So" }] },
        ],
        THINKING,
      ),
      "final assistant message: must start with a thinking block",
    ],
    [
      "five cache breakpoints",
      claude(
        [1, 2, 3, 4, 5].map((n) => ({
          role: n % 2 ? "user" : "assistant",
          content: [{ type: "text", text: `t${n}`, cache_control: { type: "ephemeral" } }],
        })),
      ),
      "A maximum of 4 blocks",
    ],
    [
      "a tool_use name with a dot",
      claude([
        { role: "user", content: "go" },
        { role: "assistant", content: [toolUse("a", "functions.write_file")] },
        { role: "user", content: [toolResult("a")] },
      ]),
      "tool_use.name",
    ],
  ])("%s is found", (_what, body, rule) => {
    expect(anthropicViolations(body).join("\n")).toContain(rule);
  });
});

describe("chatViolations", () => {
  const call = (id: string) => ({ id, type: "function", function: { name: "write_file", arguments: "{}" } });
  it("each call answered by one tool message right after it is clean", () => {
    const body = {
      messages: [
        { role: "system", content: "s" },
        { role: "user", content: "go" },
        { role: "assistant", content: "", tool_calls: [call("a"), call("b")] },
        { role: "tool", tool_call_id: "b", content: "ok" },
        { role: "tool", tool_call_id: "a", content: "ok" },
        { role: "user", content: "next" },
      ],
    };
    expect(chatViolations(body)).toEqual([]);
  });

  it.each([
    [
      "a call unanswered before the next message",
      [
        { role: "user", content: "go" },
        { role: "assistant", content: "", tool_calls: [call("a"), call("b")] },
        { role: "tool", tool_call_id: "a", content: "ok" },
        { role: "user", content: "next" },
      ],
      "responding to each 'tool_call_id': b",
    ],
    [
      "a tool message after a user message",
      [
        { role: "user", content: "go" },
        { role: "assistant", content: "", tool_calls: [call("a")] },
        { role: "user", content: "wait" },
        { role: "tool", tool_call_id: "a", content: "ok" },
      ],
      "must be a response to a preceding message with 'tool_calls'",
    ],
    [
      "an empty assistant message",
      [
        { role: "user", content: "go" },
        { role: "assistant", content: "" },
      ],
      "must have content",
    ],
  ])("%s is found", (_what, messages, rule) => {
    expect(chatViolations({ messages }).join("\n")).toContain(rule);
  });
});

describe("responsesViolations", () => {
  const fc = (callId: string) => ({
    type: "function_call",
    call_id: callId,
    name: "write_file",
    arguments: "{}",
  });
  const out = (callId: string) => ({ type: "function_call_output", call_id: callId, output: "ok" });
  const rs = { type: "reasoning", id: "rs_1", summary: [], encrypted_content: "e" };
  const body = (input: unknown[]) => ({ store: false, include: ["reasoning.encrypted_content"], input });

  it("reasoning before its calls, each call with its output, is clean", () => {
    expect(responsesViolations(body([{ role: "user", content: "go" }, rs, fc("a"), out("a")]))).toEqual([]);
  });

  it.each([
    ["a call without its output", [{ role: "user", content: "go" }, fc("a")], "No tool output found"],
    ["an output without its call", [{ role: "user", content: "go" }, out("a")], "No tool call found"],
    [
      "reasoning without encrypted content",
      [{ role: "user", content: "go" }, { ...rs, encrypted_content: undefined }, fc("a"), out("a")],
      "Items are not persisted",
    ],
    ["reasoning with nothing after it", [{ role: "user", content: "go" }, rs], "required following item"],
  ])("%s is found", (_what, input, rule) => {
    expect(responsesViolations(body(input)).join("\n")).toContain(rule);
  });
});
