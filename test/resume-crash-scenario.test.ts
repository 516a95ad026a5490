/**
 * The source's acceptance scenario (resume-semantics.md §7) at the library level: no I/O,
 * a scripted "model" that is just the next assistant message, and a tool-execution counter
 * kept by the test. A resume may only append messages; it never runs a tool.
 */
import { describe, expect, it } from "vitest";
import type { Message, ToolCall, ToolMessage } from "../src/shared/messages.js";
import { planResume } from "../src/shared/resume-plan.js";
import { resumePoint, toResumePointJson } from "../src/shared/resume-point.js";

const INTERRUPTED_LITERAL =
  "The process stopped while this tool was running, so it may or may not have completed, and whatever it changes may or may not have happened. Check the current state before running it again.";

/** A fake tool runtime: the only place a tool "executes"; counts executions per call id. */
function toolRuntime() {
  const executions: string[] = [];
  const files = new Map<string, string>();
  return {
    executions,
    files,
    execute(call: ToolCall): ToolMessage {
      executions.push(call.id);
      const path = String(call.arguments.path ?? call.arguments.name);
      files.set(path, String(call.arguments.content ?? ""));
      return { role: "tool", toolCallId: call.id, name: call.name, content: `wrote ${path}`, success: true };
    },
  };
}

/** Performs a resume the way a worker would: append the plan's messages, then the model's answer. */
function simulateResume(history: readonly Message[], modelAnswer: Message): Message[] {
  const { appends } = planResume(history);
  // The plan is messages only: nothing in it is a tool execution request.
  for (const message of appends) expect(["tool", "internal"]).toContain(message.role);
  return [...history, ...appends, modelAnswer];
}

describe("§7.1 a failure: the connection drops after the tool ran", () => {
  it("resumes with call_model, answers, and never runs the tool again", () => {
    const tools = toolRuntime();
    const writeCall: ToolCall = {
      id: "call_1",
      name: "write_file",
      arguments: { path: "notes.txt", content: "hi" },
    };
    const history: Message[] = [
      { role: "user", content: "Write notes.txt" },
      { role: "assistant", content: "I'll write it.", toolCalls: [writeCall], stopReason: "tool_use" },
    ];
    // The original run executes the tool once; then the next model call fails (nothing appended).
    history.push(tools.execute(writeCall));
    expect(tools.executions).toEqual(["call_1"]);
    expect(tools.files.get("notes.txt")).toBe("hi");

    const point = resumePoint(history);
    expect(toResumePointJson(point)).toEqual({
      resumable: true,
      kind: "call_model",
      description: expect.stringMatching(/\S/),
      unansweredToolCalls: [],
    });

    const plan = planResume(history);
    expect(plan.appends).toEqual([]);

    const before = structuredClone(history);
    const after = simulateResume(history, {
      role: "assistant",
      content: "Done: wrote notes.txt",
      stopReason: "end_turn",
    });
    expect(history).toEqual(before);
    expect(after).toHaveLength(4);
    expect(after.slice(0, 3)).toEqual(before);
    expect(after.at(-1)).toEqual({
      role: "assistant",
      content: "Done: wrote notes.txt",
      stopReason: "end_turn",
    });

    // The tool ran exactly once: by the original run, never by the resume.
    expect(tools.executions).toEqual(["call_1"]);
    expect(after.filter((m) => m.role === "tool")).toHaveLength(1);

    // Nothing left to resume.
    expect(toResumePointJson(resumePoint(after))).toEqual({ resumable: false, reason: "completed" });
    expect(() => planResume(after)).toThrow(/completed/);
  });
});

describe("§7.2 a crash: only a's result is stored", () => {
  const aResult: ToolMessage = {
    role: "tool",
    toolCallId: "a",
    name: "write_file",
    content: "wrote a.txt",
    success: true,
  };
  const stored: Message[] = [
    { role: "user", content: "Write a.txt and b.txt" },
    {
      role: "assistant",
      content: "Writing both.",
      toolCalls: [
        { id: "a", name: "write_file", arguments: { name: "a.txt" } },
        { id: "b", name: "write_file", arguments: { name: "b.txt" } },
      ],
      stopReason: "tool_use",
    },
    aResult,
  ];

  it("classifies recover_tools with exactly b unanswered", () => {
    expect(toResumePointJson(resumePoint(stored))).toEqual({
      resumable: true,
      kind: "recover_tools",
      description: expect.stringContaining("write_file"),
      unansweredToolCalls: [{ id: "b", name: "write_file", arguments: { name: "b.txt" } }],
    });
  });

  it("answers b with the exact interrupted text, keeps a, runs nothing, and completes", () => {
    const tools = toolRuntime();
    const snapshot = structuredClone(stored);

    const plan = planResume(stored);
    expect(plan.point.kind).toBe("recover_tools");
    expect(plan.appends).toEqual([
      { role: "tool", toolCallId: "b", name: "write_file", content: INTERRUPTED_LITERAL, success: false },
    ]);

    const resumed = [...stored, ...plan.appends];
    // a's result is untouched, and the stored history was not mutated.
    expect(stored).toEqual(snapshot);
    expect(resumed[2]).toEqual({
      role: "tool",
      toolCallId: "a",
      name: "write_file",
      content: "wrote a.txt",
      success: true,
    });
    expect(resumed.slice(0, 3)).toEqual(snapshot);

    expect(toResumePointJson(resumePoint(resumed))).toEqual({
      resumable: true,
      kind: "call_model",
      description: expect.stringMatching(/\S/),
      unansweredToolCalls: [],
    });

    const interruptedCount = resumed.filter((m) => m.role === "tool" && !m.success).length;
    expect(interruptedCount).toBe(1);
    const finished = simulateResume(resumed, {
      role: "assistant",
      content: `${interruptedCount} tool was interrupted`,
      stopReason: "end_turn",
    });
    expect(finished.at(-1)).toEqual({
      role: "assistant",
      content: "1 tool was interrupted",
      stopReason: "end_turn",
    });
    expect(finished).toHaveLength(5);

    // No tool was run by the resume itself.
    expect(tools.executions).toEqual([]);
    expect(toResumePointJson(resumePoint(finished))).toEqual({ resumable: false, reason: "completed" });
  });
});
