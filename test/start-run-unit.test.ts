/** planRunStart: what a queued run appends when a worker takes it (pure). */
import { describe, expect, it } from "vitest";
import type { Message, ToolCall } from "../src/shared/messages.js";
import {
  CONTINUE_RESPONSE_TEXT,
  INTERRUPTED_TOOL_TEXT,
  RETRY_RESPONSE_TEXT,
} from "../src/shared/resume-plan.js";
import { planRunStart } from "../src/worker/start-run.js";

const callA: ToolCall = { id: "a", name: "write_file", arguments: { path: "a.txt", content: "A" } };
const callB: ToolCall = { id: "b", name: "append_file", arguments: { path: "b.txt", line: "B" } };

const user: Message = { role: "user", content: "write a and b" };
const askTwo: Message = { role: "assistant", content: "", toolCalls: [callA, callB], stopReason: "tool_use" };
const resultA: Message = {
  role: "tool",
  toolCallId: "a",
  name: "write_file",
  content: "wrote a.txt",
  success: true,
};
const resultB: Message = { role: "tool", toolCallId: "b", name: "append_file", content: "ok", success: true };
const answer: Message = { role: "assistant", content: "Done", stopReason: "end_turn" };
/** What closes callB when it never answered: an error result saying it was interrupted. */
const interruptedB: Message = {
  role: "tool",
  toolCallId: "b",
  name: "append_file",
  content: INTERRUPTED_TOOL_TEXT,
  success: false,
};

const RUN = { kind: "run", input: "next question" };
const RESUME = { kind: "resume", input: null };

describe("planRunStart for new input", () => {
  it("appends only the user message after a completed request", () => {
    expect(planRunStart(RUN, [user, askTwo, resultA, resultB, answer])).toEqual({
      action: "start",
      appends: [{ role: "user", content: "next question" }],
      resumeKind: null,
      interruptedCalls: [],
    });
  });

  it("starts an empty session with the user message", () => {
    expect(planRunStart(RUN, [])).toMatchObject({
      action: "start",
      appends: [{ role: "user", content: "next question" }],
    });
  });

  it("closes unanswered calls, keeping the results that arrived, before the user message", () => {
    const history = [user, askTwo, resultA];
    const plan = planRunStart(RUN, history);
    expect(plan).toEqual({
      action: "start",
      appends: [interruptedB, { role: "user", content: "next question" }],
      resumeKind: null,
      interruptedCalls: ["append_file"],
    });
    // The plan never rewrites the history it was given.
    expect(history).toEqual([user, askTwo, resultA]);
  });

  it("closes every call when none was answered", () => {
    const plan = planRunStart(RUN, [user, askTwo]);
    expect(plan.action === "start" && plan.appends.map((m) => m.role)).toEqual(["tool", "tool", "user"]);
    expect(plan.action === "start" && plan.interruptedCalls).toEqual(["write_file", "append_file"]);
  });

  it("appends new input after an abnormal stop (no resume needed for new input)", () => {
    const plan = planRunStart(RUN, [user, { role: "assistant", content: "cut", stopReason: "interrupted" }]);
    expect(plan).toMatchObject({ action: "start", appends: [{ role: "user" }], resumeKind: null });
  });

  it("uses an empty user message when the run has no input", () => {
    expect(planRunStart({ kind: "run", input: null }, [])).toMatchObject({
      action: "start",
      appends: [{ role: "user", content: "" }],
    });
  });

  it("refuses a malformed history", () => {
    const orphan: Message = {
      role: "tool",
      toolCallId: "zzz",
      name: "write_file",
      content: "?",
      success: true,
    };
    const plan = planRunStart(RUN, [user, orphan]);
    expect(plan).toEqual({
      action: "refuse",
      outcome: "malformed",
      reason: "malformed",
      detail: expect.stringContaining("zzz"),
    });
  });
});

describe("planRunStart for a resume", () => {
  it("call_model after a user message appends nothing", () => {
    expect(planRunStart(RESUME, [user])).toEqual({
      action: "start",
      appends: [],
      resumeKind: "call_model",
      interruptedCalls: [],
    });
  });

  it("call_model after all tool results appends nothing", () => {
    expect(planRunStart(RESUME, [user, askTwo, resultA, resultB])).toMatchObject({
      action: "start",
      appends: [],
      resumeKind: "call_model",
    });
  });

  it("call_model after a paused step appends nothing", () => {
    expect(
      planRunStart(RESUME, [user, { role: "assistant", content: "…", stopReason: "paused" }]),
    ).toMatchObject({ action: "start", appends: [], resumeKind: "call_model" });
  });

  it("recover_tools answers only the unanswered calls, never re-running them", () => {
    expect(planRunStart(RESUME, [user, askTwo, resultA])).toEqual({
      action: "start",
      appends: [interruptedB],
      resumeKind: "recover_tools",
      interruptedCalls: ["append_file"],
    });
  });

  it("retry_response keeps the partial response and asks for a redo", () => {
    expect(
      planRunStart(RESUME, [user, { role: "assistant", content: "Hel", stopReason: "interrupted" }]),
    ).toEqual({
      action: "start",
      appends: [{ role: "internal", content: RETRY_RESPONSE_TEXT }],
      resumeKind: "retry_response",
      interruptedCalls: [],
    });
  });

  it("continue_response keeps the response and asks to continue", () => {
    expect(
      planRunStart(RESUME, [user, { role: "assistant", content: "long…", stopReason: "max_output" }]),
    ).toEqual({
      action: "start",
      appends: [{ role: "internal", content: CONTINUE_RESPONSE_TEXT }],
      resumeKind: "continue_response",
      interruptedCalls: [],
    });
  });

  it.each([
    ["completed", [user, answer]],
    ["refused", [user, { role: "assistant", content: "no", stopReason: "refusal" }]],
    ["context_full", [user, { role: "assistant", content: "", stopReason: "context_full" }]],
    ["unknown_stop", [user, { role: "assistant", content: "", stopReason: "weird_new_reason" }]],
    ["empty", []],
    ["malformed", [user, resultA]],
  ] as [string, Message[]][])("refuses nothing_to_resume with reason %s", (reason, history) => {
    const plan = planRunStart(RESUME, history);
    expect(plan).toMatchObject({ action: "refuse", outcome: "nothing_to_resume", reason });
  });

  it("carries the unknown stop reason as the refusal's detail", () => {
    expect(
      planRunStart(RESUME, [user, { role: "assistant", content: "", stopReason: "weird_new_reason" }]),
    ).toEqual({
      action: "refuse",
      outcome: "nothing_to_resume",
      reason: "unknown_stop",
      detail: "weird_new_reason",
    });
  });
});

describe("planRunStart for a resume of a resume", () => {
  const cut: Message = { role: "assistant", content: "Hel", stopReason: "interrupted" };
  const long: Message = { role: "assistant", content: "long…", stopReason: "max_output" };

  /** The first resume's plan, its appends stored, then its worker died before the model answered. */
  function afterFirstResume(history: Message[]): Message[] {
    const first = planRunStart(RESUME, history);
    if (first.action !== "start") throw new Error(`first resume refused: ${first.reason}`);
    return [...history, ...first.appends];
  }

  it.each([
    ["recover_tools, one of two answered", [user, askTwo, resultA]],
    ["recover_tools, none answered", [user, askTwo]],
    ["retry_response", [user, cut]],
    ["continue_response", [user, long]],
    ["call_model", [user]],
  ] as [string, Message[]][])(
    "after a %s resume whose worker died: call_model, adding nothing",
    (_kind, history) => {
      const stored = afterFirstResume(history);
      // No call is answered twice, and no instruction is given twice.
      expect(planRunStart(RESUME, stored)).toEqual({
        action: "start",
        appends: [],
        resumeKind: "call_model",
        interruptedCalls: [],
      });
    },
  );

  it("a resumed response cut again is resumed by its own kind, with one more instruction", () => {
    const retried = [...afterFirstResume([user, cut]), { ...cut, content: "Hello, wor" }];
    expect(planRunStart(RESUME, retried)).toEqual({
      action: "start",
      appends: [{ role: "internal", content: RETRY_RESPONSE_TEXT }],
      resumeKind: "retry_response",
      interruptedCalls: [],
    });
    const continued = [...afterFirstResume([user, long]), { ...long, content: " and longer…" }];
    expect(planRunStart(RESUME, continued)).toMatchObject({
      appends: [{ role: "internal", content: CONTINUE_RESPONSE_TEXT }],
      resumeKind: "continue_response",
    });
  });

  it("a resume whose model asked for tools again and died among them owes only the new step's calls", () => {
    const callC: ToolCall = { id: "c", name: "write_file", arguments: { path: "c.txt", content: "C" } };
    const callD: ToolCall = { id: "d", name: "append_file", arguments: { path: "d.txt", line: "D" } };
    // Anthropic: signed thinking before the calls, stored with the step (contracts §13).
    const thinking = {
      provider: "anthropic",
      blocks: [{ type: "thinking", thinking: "c then d", signature: "sig" }],
    };
    const askAgain: Message = {
      role: "assistant",
      content: "",
      toolCalls: [callC, callD],
      stopReason: "tool_use",
      providerState: thinking,
    };
    const resultC: Message = {
      role: "tool",
      toolCallId: "c",
      name: "write_file",
      content: "wrote c.txt",
      success: true,
    };
    const history = [...afterFirstResume([user, askTwo, resultA]), askAgain, resultC];
    const before = structuredClone(history);
    expect(planRunStart(RESUME, history)).toEqual({
      action: "start",
      appends: [
        {
          role: "tool",
          toolCallId: "d",
          name: "append_file",
          content: INTERRUPTED_TOOL_TEXT,
          success: false,
        },
      ],
      resumeKind: "recover_tools",
      interruptedCalls: ["append_file"],
    });
    // The step keeps its thinking; nothing stored is rewritten.
    expect(history).toEqual(before);
  });

  it("new input after a cut step that carried half-formed calls closes none of them", () => {
    const cutWithCalls: Message = { ...cut, toolCalls: [callA, callB] };
    expect(planRunStart(RUN, [user, cutWithCalls])).toEqual({
      action: "start",
      appends: [{ role: "user", content: "next question" }],
      resumeKind: null,
      interruptedCalls: [],
    });
    expect(planRunStart(RESUME, [user, cutWithCalls])).toMatchObject({
      appends: [{ role: "internal", content: RETRY_RESPONSE_TEXT }],
      resumeKind: "retry_response",
      interruptedCalls: [],
    });
  });
});
