import { describe, expect, it } from "vitest";
import { AgentResumeError, ValidationError } from "../src/shared/errors.js";
import { isStorableText, type Message, parseHistory, type ToolCall } from "../src/shared/messages.js";
import {
  CONTINUE_RESPONSE_TEXT,
  closeUnansweredToolCalls,
  INTERRUPTED_TOOL_TEXT,
  planResume,
  RETRY_RESPONSE_TEXT,
  resumeAppends,
} from "../src/shared/resume-plan.js";
import {
  type NotResumableReason,
  type ResumeKind,
  resumePoint,
  toResumePointJson,
} from "../src/shared/resume-point.js";
import {
  fromAnthropicStopReason,
  fromOpenAIFinishReason,
  isKnownStopReason,
  isNormalStop,
  STOP_REASONS,
  stopReasonLabel,
} from "../src/shared/stop-reasons.js";

/** The exact text of resume-semantics.md §3, written out on purpose (not imported). */
const INTERRUPTED_LITERAL =
  "The process stopped while this tool was running, so it may or may not have completed, and whatever it changes may or may not have happened. Check the current state before running it again.";

const call = (id: string): ToolCall => ({ id, name: `tool_${id}`, arguments: { target: `${id}.txt` } });
const user = (content = "please do it"): Message => ({ role: "user", content });
const internal = (content = "runtime note"): Message => ({ role: "internal", content });
const assistant = (stopReason: string, ids: string[] = [], content = "answer"): Message =>
  ids.length > 0
    ? { role: "assistant", content, stopReason, toolCalls: ids.map(call) }
    : { role: "assistant", content, stopReason };
const result = (id: string, success = true, content = `done ${id}`): Message => ({
  role: "tool",
  toolCallId: id,
  name: `tool_${id}`,
  content,
  success,
});

type Expected =
  | { kind: ResumeKind; unanswered?: string[] }
  | { reason: NotResumableReason; detail?: string | RegExp };

type Case = { name: string; history: Message[]; expected: Expected };

const cases: Case[] = [
  // §2 table, row by row
  { name: "ends with a user message", history: [user()], expected: { kind: "call_model" } },
  {
    name: "ends with an internal message",
    history: [user(), assistant("max_output", [], "partial"), internal(CONTINUE_RESPONSE_TEXT)],
    expected: { kind: "call_model" },
  },
  {
    name: "ends with an internal message only",
    history: [internal()],
    expected: { kind: "call_model" },
  },
  {
    name: "ends with tool results, all present",
    history: [user(), assistant("tool_use", ["a", "b"]), result("a"), result("b")],
    expected: { kind: "call_model" },
  },
  {
    name: "ends with a paused assistant step",
    history: [user(), assistant("paused", [], "thinking")],
    expected: { kind: "call_model" },
  },
  {
    name: "ends with tool calls without results",
    history: [user(), assistant("tool_use", ["a"])],
    expected: { kind: "recover_tools", unanswered: ["a"] },
  },
  {
    name: "ends with an interrupted response",
    history: [user(), assistant("interrupted", [], "half an ans")],
    expected: { kind: "retry_response" },
  },
  {
    name: "ends with a max_output response",
    history: [user(), assistant("max_output", [], "a very long")],
    expected: { kind: "continue_response" },
  },
  {
    name: "ends with a normal answer",
    history: [user(), assistant("end_turn")],
    expected: { reason: "completed" },
  },
  { name: "ends with a refusal", history: [user(), assistant("refusal")], expected: { reason: "refused" } },
  {
    name: "ends with context_full",
    history: [user(), assistant("context_full", [], "")],
    expected: { reason: "context_full" },
  },
  {
    name: "ends with an unknown stop reason",
    history: [user(), assistant("weird_reason")],
    expected: { reason: "unknown_stop", detail: "weird_reason" },
  },
  {
    name: "an un-normalised provider value is unknown, not a normal answer",
    history: [user(), assistant("stop_sequence")],
    expected: { reason: "unknown_stop", detail: "stop_sequence" },
  },
  {
    name: "stop reasons are case-sensitive",
    history: [user(), assistant("END_TURN")],
    expected: { reason: "unknown_stop", detail: "END_TURN" },
  },
  // the two extra errors
  { name: "empty history", history: [], expected: { reason: "empty" } },
  {
    name: "a tool result that answers no call",
    history: [user(), result("x")],
    expected: { reason: "malformed", detail: /messages\[1\]/ },
  },
  // edge cases
  {
    name: "results out of order",
    history: [user(), assistant("tool_use", ["a", "b", "c"]), result("c"), result("a"), result("b")],
    expected: { kind: "call_model" },
  },
  {
    name: "a failed result counts as an answer",
    history: [user(), assistant("tool_use", ["a"]), result("a", false, "Error: disk full")],
    expected: { kind: "call_model" },
  },
  {
    name: "a cancelled result counts as an answer",
    history: [user(), assistant("tool_use", ["a", "b"]), result("a"), result("b", false, "cancelled")],
    expected: { kind: "call_model" },
  },
  {
    name: "several unanswered calls are listed in call order",
    history: [user(), assistant("tool_use", ["a", "b", "c", "d"]), result("d"), result("b")],
    expected: { kind: "recover_tools", unanswered: ["a", "c"] },
  },
  {
    name: "all calls unanswered",
    history: [user(), assistant("tool_use", ["c", "a", "b"])],
    expected: { kind: "recover_tools", unanswered: ["c", "a", "b"] },
  },
  {
    name: "end_turn with tool calls and no results",
    history: [user(), assistant("end_turn", ["a", "b"])],
    expected: { kind: "recover_tools", unanswered: ["a", "b"] },
  },
  {
    name: "unanswered calls of a second turn only",
    history: [
      user(),
      assistant("tool_use", ["a", "b"]),
      result("b"),
      result("a"),
      assistant("tool_use", ["c", "d", "e"]),
      result("d"),
    ],
    expected: { kind: "recover_tools", unanswered: ["c", "e"] },
  },
  {
    name: "a call id reused by the second turn is scoped to that turn",
    history: [
      user(),
      assistant("tool_use", ["a"]),
      result("a"),
      assistant("tool_use", ["a", "b"]),
      result("b"),
    ],
    expected: { kind: "recover_tools", unanswered: ["a"] },
  },
  {
    name: "a result for an unknown call id",
    history: [user(), assistant("tool_use", ["a"]), result("zzz")],
    expected: { reason: "malformed", detail: /messages\[2\].*zzz/ },
  },
  {
    name: "an unknown call id after a valid answer",
    history: [user(), assistant("tool_use", ["a"]), result("a"), result("zzz")],
    expected: { reason: "malformed", detail: /messages\[3\]/ },
  },
  {
    name: "a duplicate answer",
    history: [user(), assistant("tool_use", ["a", "b"]), result("a"), result("a")],
    expected: { reason: "malformed", detail: /second time/ },
  },
  {
    // parseHistory refuses this on input; a library caller of resumePoint gets no resume
    // that would add two results for one id (which would itself be "a second time").
    name: "two calls with one id, none answered",
    history: [user(), assistant("tool_use", ["a", "a"])],
    expected: { reason: "malformed", detail: /messages\[1\] has two tool calls with the id "a"/ },
  },
  {
    name: "two calls with one id, one result",
    history: [user(), assistant("tool_use", ["b", "a", "a"]), result("a"), result("b")],
    expected: { reason: "malformed", detail: /two tool calls with the id "a"/ },
  },
  {
    name: "a result for a call of an earlier step",
    history: [user(), assistant("tool_use", ["a"]), result("a"), user("more"), result("a")],
    expected: { reason: "malformed", detail: /messages\[4\]/ },
  },
  {
    name: "a result for a call of a step that was cut (never executed)",
    history: [user(), assistant("interrupted", ["a"]), result("a")],
    expected: { reason: "malformed", detail: /messages\[2\] answers no call/ },
  },
  {
    name: "an unanswered call followed by a user message",
    history: [user(), assistant("tool_use", ["a", "b"]), result("a"), user("next")],
    expected: { reason: "malformed", detail: /"b".*messages\[1\].*messages\[3\]/ },
  },
  {
    name: "interrupted after tool results",
    history: [user(), assistant("tool_use", ["a"]), result("a"), assistant("interrupted", [], "partial")],
    expected: { kind: "retry_response" },
  },
  {
    name: "max_output after tool results",
    history: [user(), assistant("tool_use", ["a"]), result("a"), assistant("max_output", [], "long")],
    expected: { kind: "continue_response" },
  },
  {
    name: "refusal after tool results",
    history: [user(), assistant("tool_use", ["a"]), result("a", false), assistant("refusal", [], "no")],
    expected: { reason: "refused" },
  },
  {
    name: "completed after tool results",
    history: [user(), assistant("tool_use", ["a"]), result("a"), assistant("end_turn", [], "done")],
    expected: { reason: "completed" },
  },
  {
    name: "interrupted step with half-formed calls is not owed results",
    history: [user(), assistant("interrupted", ["a"], "partial")],
    expected: { kind: "retry_response", unanswered: [] },
  },
  {
    name: "max_output step with half-formed calls is not owed results",
    history: [user(), assistant("max_output", ["a"], "partial")],
    expected: { kind: "continue_response", unanswered: [] },
  },
  {
    name: "paused step with calls is not owed results",
    history: [user(), assistant("paused", ["a"])],
    expected: { kind: "call_model", unanswered: [] },
  },
  {
    name: "refusal with calls is refused, not recovered",
    history: [user(), assistant("refusal", ["a"])],
    expected: { reason: "refused" },
  },
  {
    name: "tool_use with no calls asks for nothing: completed",
    history: [user(), assistant("tool_use", [])],
    expected: { reason: "completed" },
  },
];

describe("resumePoint / toResumePointJson: the §2 table", () => {
  it.each(cases)("$name", ({ history, expected }) => {
    const json = toResumePointJson(resumePoint(history));
    if ("kind" in expected) {
      const ids = expected.unanswered ?? [];
      expect(json).toEqual({
        resumable: true,
        kind: expected.kind,
        description: expect.any(String),
        unansweredToolCalls: ids.map(call),
      });
      expect(json.resumable && json.description.trim().length).toBeGreaterThan(0);
      expect(Object.keys(json).sort()).toEqual(["description", "kind", "resumable", "unansweredToolCalls"]);
    } else if (expected.detail === undefined) {
      expect(json).toEqual({ resumable: false, reason: expected.reason });
    } else {
      expect(json).toEqual({
        resumable: false,
        reason: expected.reason,
        detail:
          typeof expected.detail === "string" ? expected.detail : expect.stringMatching(expected.detail),
      });
    }
  });

  it("covers every kind and every reason", () => {
    const kinds = new Set(cases.flatMap((c) => ("kind" in c.expected ? [c.expected.kind] : [])));
    const reasons = new Set(cases.flatMap((c) => ("reason" in c.expected ? [c.expected.reason] : [])));
    expect([...kinds].sort()).toEqual(["call_model", "continue_response", "recover_tools", "retry_response"]);
    expect([...reasons].sort()).toEqual([
      "completed",
      "context_full",
      "empty",
      "malformed",
      "refused",
      "unknown_stop",
    ]);
  });

  it("names an unknown stop reason of any length in a bounded detail, surrogate pairs whole", () => {
    // A scripted step (any caller) or a provider may say any stop reason: 2,000,000 characters
    // became a parked reason, a log line and a 409's message of that size.
    const long = `odd${"😀".repeat(1_000_000)}`;
    const point = resumePoint([user(), assistant(long)]);
    if (point.resumable) throw new Error("resumable");
    expect(point.reason).toBe("unknown_stop");
    expect(point.detail!.length).toBeLessThanOrEqual(160);
    expect(point.detail).toMatch(/^odd(😀)+… \(2,000,003 characters\)$/u);
    expect(isStorableText(point.detail!)).toBe(true);
    // A short one is named whole, as before.
    expect(resumePoint([user(), assistant("x".repeat(120))])).toMatchObject({ detail: "x".repeat(120) });
  });

  it("does not mutate the history", () => {
    const history = [user(), assistant("tool_use", ["a", "b"]), result("b")];
    const before = structuredClone(history);
    resumePoint(history);
    planResume(history);
    closeUnansweredToolCalls(history);
    expect(history).toEqual(before);
  });

  it("distinguishes the three call_model causes in its description", () => {
    const descriptions = [
      [user()],
      [user(), assistant("tool_use", ["a"]), result("a")],
      [user(), assistant("paused")],
    ].map((h) => {
      const json = toResumePointJson(resumePoint(h));
      return json.resumable ? json.description : "";
    });
    expect(new Set(descriptions).size).toBe(3);
    expect(descriptions.every((d) => d.length > 0)).toBe(true);
  });

  it("names the interrupted tools in the recover_tools description", () => {
    const history: Message[] = [
      user(),
      {
        role: "assistant",
        content: "",
        stopReason: "tool_use",
        toolCalls: [
          { id: "a", name: "write_file", arguments: {} },
          { id: "b", name: "append_file", arguments: {} },
        ],
      },
    ];
    const json = toResumePointJson(resumePoint(history));
    expect(json.resumable && json.kind).toBe("recover_tools");
    expect(json.resumable && json.description).toContain("write_file");
    expect(json.resumable && json.description).toContain("append_file");
    expect(json.resumable && json.description).toContain("2 tool calls");
  });

  it("keeps the recover_tools description fit for a tooltip, however many calls and however long their names", () => {
    // §2: a `description` fit for a tooltip on a "Resume" button. Tool names are model output
    // (a model may invent any name, and a step may ask for up to 1,000 calls): the description
    // names a few of them, each bounded, and says how many there are.
    const calls: ToolCall[] = Array.from({ length: 1000 }, (_, i) => ({
      id: `c${i}`,
      name: `${"x".repeat(10_000)}_${i}`,
      arguments: {},
    }));
    const json = toResumePointJson(
      resumePoint([user(), { role: "assistant", content: "", stopReason: "tool_use", toolCalls: calls }]),
    );
    expect(json.resumable && json.kind).toBe("recover_tools");
    const description = json.resumable ? json.description : "";
    expect(description).toContain("1000 tool calls");
    expect(description).toMatch(/and 99\d more/);
    expect(description.length).toBeLessThan(1000);
    // The list itself is whole: the calls owed are all there.
    expect(json.resumable && json.unansweredToolCalls).toHaveLength(1000);
    // One call with a short name is still named as before.
    const one = toResumePointJson(resumePoint([user(), assistant("tool_use", ["a"])]));
    expect(one.resumable && one.description).toBe(
      "The process stopped while 1 tool call was running (tool_a). Resuming tells the model it was interrupted instead of running it again, then calls the model.",
    );
  });
});

describe("resumeAppends / planResume", () => {
  it("the interrupted text is exactly the spec's text", () => {
    expect(INTERRUPTED_TOOL_TEXT).toBe(INTERRUPTED_LITERAL);
  });

  it("recover_tools: one failed result per unanswered call, in call order", () => {
    const history = [user(), assistant("tool_use", ["a", "b", "c"]), result("b")];
    const plan = planResume(history);
    expect(plan.point.kind).toBe("recover_tools");
    const expected = [
      { role: "tool", toolCallId: "a", name: "tool_a", content: INTERRUPTED_LITERAL, success: false },
      { role: "tool", toolCallId: "c", name: "tool_c", content: INTERRUPTED_LITERAL, success: false },
    ];
    expect(plan.appends).toEqual(expected);
    expect(resumeAppends(plan.point)).toEqual(expected);
  });

  it("recover_tools keeps the results that arrived (appends only, never replaces)", () => {
    const history = [user(), assistant("tool_use", ["a", "b"]), result("a", true, "wrote a.txt")];
    const { appends } = planResume(history);
    expect(appends.map((m) => (m.role === "tool" ? m.toolCallId : m.role))).toEqual(["b"]);
    expect(resumePoint([...history, ...appends])).toEqual({
      resumable: true,
      kind: "call_model",
      cause: "tools_answered",
      unansweredToolCalls: [],
    });
  });

  it("retry_response: one internal message to redo the response from the beginning", () => {
    const { point, appends } = planResume([user(), assistant("interrupted", [], "partial")]);
    expect(point.kind).toBe("retry_response");
    expect(appends).toHaveLength(1);
    expect(appends[0]!.role).toBe("internal");
    expect(appends[0]!.content).toMatch(/cut off/i);
    expect(appends[0]!.content).toMatch(/from the beginning/i);
    expect(appends).toEqual([{ role: "internal", content: RETRY_RESPONSE_TEXT }]);
  });

  it("continue_response: one internal message to continue exactly where it stopped", () => {
    const { point, appends } = planResume([user(), assistant("max_output", [], "long")]);
    expect(point.kind).toBe("continue_response");
    expect(appends).toHaveLength(1);
    expect(appends[0]!.role).toBe("internal");
    expect(appends[0]!.content).toMatch(/continue exactly where it stopped/i);
    expect(appends).toEqual([{ role: "internal", content: CONTINUE_RESPONSE_TEXT }]);
  });

  it.each([
    ["awaiting_answer", [user()]],
    ["tools_answered", [user(), assistant("tool_use", ["a"]), result("a")]],
    ["paused", [user(), assistant("paused")]],
  ] as const)("call_model (%s): appends nothing", (cause, history) => {
    const plan = planResume(history);
    expect(plan.point).toEqual({ resumable: true, kind: "call_model", cause, unansweredToolCalls: [] });
    expect(plan.appends).toEqual([]);
  });

  it.each([
    ["completed", [user(), assistant("end_turn")]],
    ["refused", [user(), assistant("refusal")]],
    ["context_full", [user(), assistant("context_full")]],
    ["unknown_stop", [user(), assistant("mystery")]],
    ["empty", []],
    ["malformed", [user(), result("nope")]],
    ["malformed", [user(), assistant("tool_use", ["a", "a"])]],
  ] as const)("planResume throws AgentResumeError(%s)", (reason, history) => {
    let caught: unknown;
    try {
      planResume(history);
    } catch (error) {
      caught = error;
    }
    expect(caught).toBeInstanceOf(AgentResumeError);
    expect((caught as AgentResumeError).reason).toBe(reason);
    expect((caught as AgentResumeError).name).toBe("AgentResumeError");
    expect((caught as AgentResumeError).message).toContain(reason);
  });
});

describe("closeUnansweredToolCalls", () => {
  it("returns synthetic results for only the missing calls", () => {
    const history = [
      user(),
      assistant("tool_use", ["a"]),
      result("a"),
      assistant("tool_use", ["b", "c", "d"]),
      result("c", false, "boom"),
    ];
    const closing = closeUnansweredToolCalls(history);
    expect(closing).toEqual([
      { role: "tool", toolCallId: "b", name: "tool_b", content: INTERRUPTED_LITERAL, success: false },
      { role: "tool", toolCallId: "d", name: "tool_d", content: INTERRUPTED_LITERAL, success: false },
    ]);
    const next = [...history, ...closing, user("new input")];
    expect(toResumePointJson(resumePoint(next))).toMatchObject({ resumable: true, kind: "call_model" });
  });

  it.each([
    ["empty", []],
    ["awaiting answer", [user()]],
    ["all answered", [user(), assistant("tool_use", ["a"]), result("a")]],
    ["completed", [user(), assistant("end_turn")]],
    ["refused", [user(), assistant("refusal")]],
    ["interrupted with half-formed calls", [user(), assistant("interrupted", ["a"])]],
    ["unknown stop", [user(), assistant("mystery", ["a"])]],
  ] as const)("returns nothing when none is missing (%s)", (_name, history) => {
    expect(closeUnansweredToolCalls(history)).toEqual([]);
  });

  it.each([
    ["unknown id", [user(), assistant("tool_use", ["a"]), result("x")]],
    ["duplicate answer", [user(), assistant("tool_use", ["a"]), result("a"), result("a")]],
    ["open call followed by user", [user(), assistant("tool_use", ["a"]), user()]],
    ["two calls with one id", [user(), assistant("tool_use", ["a", "a"])]],
  ] as const)("throws AgentResumeError(malformed) on a malformed history (%s)", (_name, history) => {
    expect(() => closeUnansweredToolCalls(history)).toThrow(AgentResumeError);
    try {
      closeUnansweredToolCalls(history);
    } catch (error) {
      expect((error as AgentResumeError).reason).toBe("malformed");
    }
  });
});

describe("parseHistory", () => {
  const fieldOf = (value: unknown): { field: string; message: string } => {
    try {
      parseHistory(value);
    } catch (error) {
      expect(error).toBeInstanceOf(ValidationError);
      return { field: (error as ValidationError).field, message: (error as ValidationError).message };
    }
    throw new Error("parseHistory accepted invalid input");
  };

  it("names messages[1].stopReason when an assistant lacks it", () => {
    const err = fieldOf([
      { role: "user", content: "hi" },
      { role: "assistant", content: "hello" },
    ]);
    expect(err.field).toBe("messages[1].stopReason");
    expect(err.message).toContain("messages[1].stopReason");
  });

  it("rejects an empty stopReason", () => {
    expect(fieldOf([{ role: "assistant", content: "", stopReason: "" }]).field).toBe(
      "messages[0].stopReason",
    );
  });

  it("names the role of an unknown role", () => {
    const err = fieldOf([
      { role: "user", content: "hi" },
      { role: "system", content: "x" },
    ]);
    expect(err.field).toBe("messages[1].role");
    expect(err.message).toContain("messages[1].role");
    expect(err.message).toContain("user");
  });

  it("names a duplicate tool call id in one message", () => {
    const err = fieldOf([
      { role: "user", content: "hi" },
      {
        role: "assistant",
        content: "",
        stopReason: "tool_use",
        toolCalls: [
          { id: "a", name: "write_file", arguments: {} },
          { id: "a", name: "write_file", arguments: {} },
        ],
      },
    ]);
    expect(err.field).toBe("messages[1].toolCalls[1].id");
    expect(err.message).toMatch(/duplicate tool call id "a"/);
  });

  it("refuses providerState on a response that was cut off (contracts §13)", () => {
    const state = { provider: "anthropic", api: "messages", target: "x", content: [{ type: "thinking" }] };
    const err = fieldOf([
      { role: "user", content: "hi" },
      { role: "assistant", content: "part", stopReason: "interrupted", providerState: state },
    ]);
    expect(err.field).toBe("messages[1].providerState");
    expect(err.message).toMatch(/cut off.*keeps no providerState/);
    // A whole step keeps it, as do steps that stopped for their length.
    for (const stopReason of ["end_turn", "max_output"]) {
      const [, step] = parseHistory([
        { role: "user", content: "hi" },
        { role: "assistant", content: "part", stopReason, providerState: state },
      ]);
      expect(step).toMatchObject({ providerState: state });
    }
  });

  it("refuses tool call ids longer than 256 characters, naming the field", () => {
    const long = "x".repeat(257);
    const call = (id: string) => ({ id, name: "write_file", arguments: {} });
    const asked = fieldOf([
      { role: "user", content: "hi" },
      { role: "assistant", content: "", stopReason: "tool_use", toolCalls: [call("a"), call(long)] },
    ]);
    expect(asked.field).toBe("messages[1].toolCalls[1].id");
    expect(asked.message).toMatch(/longer than 256 characters/);
    const answered = fieldOf([
      { role: "user", content: "hi" },
      { role: "assistant", content: "", stopReason: "tool_use", toolCalls: [call("a")] },
      { role: "tool", toolCallId: long, name: "write_file", content: "ok", success: true },
    ]);
    expect(answered.field).toBe("messages[2].toolCallId");
    expect(
      parseHistory([
        { role: "assistant", content: "", stopReason: "tool_use", toolCalls: [call("y".repeat(256))] },
      ]),
    ).toHaveLength(1);
  });

  it("accepts the same call id in two different messages", () => {
    const history = [
      {
        role: "assistant",
        content: "",
        stopReason: "tool_use",
        toolCalls: [{ id: "a", name: "w", arguments: {} }],
      },
      { role: "tool", toolCallId: "a", name: "w", content: "", success: true },
      {
        role: "assistant",
        content: "",
        stopReason: "tool_use",
        toolCalls: [{ id: "a", name: "w", arguments: {} }],
      },
    ];
    expect(parseHistory(history)).toEqual(history);
  });

  it.each([{}, "[]", null, 42])("rejects a non-array (%j)", (value) => {
    const err = fieldOf(value);
    expect(err.field).toBe("messages");
    expect(err.message).toMatch(/array/);
  });

  it("names a nested tool call field", () => {
    const err = fieldOf([
      {
        role: "assistant",
        content: "",
        stopReason: "tool_use",
        toolCalls: [{ id: "a", name: "w", arguments: [] }],
      },
    ]);
    expect(err.field).toBe("messages[0].toolCalls[0].arguments");
  });

  it("names a tool message missing success", () => {
    const err = fieldOf([
      { role: "user", content: "" },
      { role: "tool", toolCallId: "a", name: "w", content: "" },
    ]);
    expect(err.field).toBe("messages[1].success");
  });

  it("rejects unknown fields", () => {
    expect(fieldOf([{ role: "user", content: "", extra: 1 }]).message).toBe(
      "messages[0].extra: unknown field",
    );
  });

  it("accepts stored fields and strips them", () => {
    const parsed = parseHistory([
      { role: "user", content: "hi", seq: 1, createdAt: "2024-01-01T00:00:00.000Z" },
      {
        role: "assistant",
        content: "ok",
        stopReason: "end_turn",
        seq: 2,
        createdAt: "2024-01-01T00:00:01.000Z",
      },
    ]);
    expect(parsed).toEqual([
      { role: "user", content: "hi" },
      { role: "assistant", content: "ok", stopReason: "end_turn" },
    ]);
  });
});

describe("stop reasons (resume-semantics.md §6)", () => {
  it("lists exactly the normalised values", () => {
    expect([...STOP_REASONS]).toEqual([
      "end_turn",
      "tool_use",
      "paused",
      "interrupted",
      "max_output",
      "refusal",
      "context_full",
    ]);
    for (const value of STOP_REASONS) expect(isKnownStopReason(value)).toBe(true);
    expect(isKnownStopReason("stop")).toBe(false);
    expect(isKnownStopReason("")).toBe(false);
  });

  it.each([
    ["end_turn", "end_turn"],
    ["stop_sequence", "end_turn"],
    ["tool_use", "tool_use"],
    ["pause_turn", "paused"],
    ["max_tokens", "max_output"],
    ["refusal", "refusal"],
    ["model_context_window_exceeded", "context_full"],
  ])("Anthropic %s → %s", (provider, normalised) => {
    expect(fromAnthropicStopReason(provider)).toBe(normalised);
  });

  it.each([
    ["stop", "end_turn"],
    ["tool_calls", "tool_use"],
    ["function_call", "tool_use"],
    ["length", "max_output"],
    ["content_filter", "refusal"],
  ])("OpenAI %s → %s", (provider, normalised) => {
    expect(fromOpenAIFinishReason(provider)).toBe(normalised);
  });

  it("keeps unknown provider values verbatim, which classify as unknown_stop", () => {
    for (const value of ["brand_new_reason", "STOP", "length "]) {
      expect(fromAnthropicStopReason(value)).toBe(value);
      expect(fromOpenAIFinishReason(value)).toBe(value);
      expect(resumePoint([user(), assistant(fromOpenAIFinishReason(value))])).toEqual({
        resumable: false,
        reason: "unknown_stop",
        detail: value,
      });
    }
    // a value of the other provider is not silently mapped
    expect(fromOpenAIFinishReason("max_tokens")).toBe("max_tokens");
    expect(fromAnthropicStopReason("length")).toBe("length");
  });

  it("labels unknown values as other and knows which stops are normal", () => {
    expect(stopReasonLabel("max_output")).toBe("max_output");
    expect(stopReasonLabel("weird")).toBe("other");
    expect(STOP_REASONS.filter(isNormalStop)).toEqual(["end_turn", "tool_use"]);
    expect(isNormalStop("stop")).toBe(false);
  });
});
