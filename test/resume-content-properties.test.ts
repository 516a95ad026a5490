/**
 * The resume contract's rules (resume-semantics.md §2–§3) as properties over what
 * test/resume-properties.test.ts leaves out: the text a history carries. The classification
 * and what a resume appends depend on roles, call ids and stop reasons alone, never on content
 * (unicode, NUL bytes, lone surrogates, empty, very long), arguments, usage or the provider's
 * reasoning blocks (`providerState`); it rests on the last turn, whatever completed turns come
 * before it; and wide parallel steps are answered exactly where results are missing.
 */
import fc from "fast-check";
import { describe, expect, it } from "vitest";
import {
  isStorableText,
  MAX_TOOL_CALLS_PER_STEP,
  type Message,
  type ToolCall,
} from "../src/shared/messages.js";
import { resumeAppends } from "../src/shared/resume-plan.js";
import { type ResumePoint, resumePoint, stopReasonDetail } from "../src/shared/resume-point.js";
import { STOP_REASONS } from "../src/shared/stop-reasons.js";

/** resume-semantics.md §3, written out on purpose (not imported). */
const INTERRUPTED_LITERAL =
  "The process stopped while this tool was running, so it may or may not have completed, and whatever it changes may or may not have happened. Check the current state before running it again.";

const NUM_RUNS = 300;

/** Any text a message may hold: every kind of string a caller or a model can produce. */
const anyText = fc.oneof(
  fc.constant(""),
  fc.string({ unit: "binary", maxLength: 20 }),
  fc.string({ unit: "grapheme", maxLength: 20 }),
  fc.constantFrom("\u0000", "a\u0000b", "\uD800", "\uDC00x", "😀", "\u202Eevil", "line\r\nline", " "),
  fc.nat({ max: 3 }).map((k) => "long ".repeat(20_000 * (k + 1))),
);

/** A history's shape: roles, call ids, stop reasons and which results arrived. */
type Shape =
  | { role: "user" | "internal" }
  | { role: "assistant"; ids: string[]; stopReason: string }
  | { role: "tool"; id: string; success: boolean };

const ID_POOL = ["a", "b", "c", "d"];
const stopArb = fc.oneof(
  { arbitrary: fc.constantFrom("tool_use", "end_turn"), weight: 3 },
  { arbitrary: fc.constantFrom(...STOP_REASONS), weight: 2 },
  { arbitrary: fc.constantFrom("stop", "pause_turn", ""), weight: 1 },
);
const shapeArb: fc.Arbitrary<Shape> = fc.oneof(
  fc.record({ role: fc.constantFrom("user" as const, "internal" as const) }),
  fc.record({
    role: fc.constant("assistant" as const),
    ids: fc.uniqueArray(fc.constantFrom(...ID_POOL), { maxLength: 4 }),
    stopReason: stopArb,
  }),
  fc.record({ role: fc.constant("tool" as const), id: fc.constantFrom(...ID_POOL), success: fc.boolean() }),
);

/** The same shape with everything the classification must not look at drawn at random. */
type Dress = {
  content: string;
  name: string;
  args: Record<string, unknown>;
  extra: boolean;
  reasoning: string;
};
const dressArb: fc.Arbitrary<Dress> = fc.record({
  content: anyText,
  name: fc.oneof(
    fc.constantFrom("write_file", "sleep"),
    fc.string({ unit: "grapheme", minLength: 1, maxLength: 8 }),
  ),
  args: fc.dictionary(fc.string({ unit: "binary", maxLength: 4 }), fc.jsonValue({ maxDepth: 2 }), {
    maxKeys: 3,
  }),
  extra: fc.boolean(),
  reasoning: anyText,
});

function plainOf(shape: Shape): Message {
  switch (shape.role) {
    case "user":
    case "internal":
      return { role: shape.role, content: "x" };
    case "assistant":
      return shape.ids.length > 0
        ? {
            role: "assistant",
            content: "x",
            toolCalls: shape.ids.map((id) => ({ id, name: "t", arguments: {} })),
            stopReason: shape.stopReason,
          }
        : { role: "assistant", content: "x", stopReason: shape.stopReason };
    case "tool":
      return { role: "tool", toolCallId: shape.id, name: "t", content: "x", success: shape.success };
  }
}

function dressed(shape: Shape, dress: Dress): Message {
  switch (shape.role) {
    case "user":
    case "internal":
      return { role: shape.role, content: dress.content };
    case "assistant": {
      const calls: ToolCall[] = shape.ids.map((id) => ({ id, name: dress.name, arguments: dress.args }));
      return {
        role: "assistant",
        content: dress.content,
        ...(calls.length > 0 || dress.extra ? { toolCalls: calls } : {}),
        stopReason: shape.stopReason,
        ...(dress.extra
          ? {
              usage: { inputTokens: 1, outputTokens: 2, reasoningTokens: 1 },
              providerState: {
                provider: "anthropic",
                blocks: [{ type: "thinking", thinking: dress.reasoning }],
              },
            }
          : {}),
      };
    }
    case "tool":
      return {
        role: "tool",
        toolCallId: shape.id,
        name: dress.name,
        content: dress.content,
        success: shape.success,
      };
  }
}

/** What the contract says of a point, without its words: kind or reason, and the calls owed. */
function verdict(point: ResumePoint): { outcome: string; owed: string[] } {
  return point.resumable
    ? { outcome: point.kind, owed: point.unansweredToolCalls.map((c) => c.id) }
    : { outcome: point.reason, owed: [] };
}

const historyArb = fc.array(fc.tuple(shapeArb, dressArb), { maxLength: 8 });

describe("the resume rules do not read the text a history carries", () => {
  it("a history classifies as its shape does, whatever its content, arguments, usage and reasoning blocks", () => {
    fc.assert(
      fc.property(historyArb, (pairs) => {
        const plain = pairs.map(([shape]) => plainOf(shape));
        const rich = pairs.map(([shape, dress]) => dressed(shape, dress));
        const before = structuredClone(rich);
        expect(verdict(resumePoint(rich))).toEqual(verdict(resumePoint(plain)));
        expect(rich).toEqual(before);
      }),
      { numRuns: NUM_RUNS },
    );
  });

  it("what a resume appends is the shape's, with the calls' own names and the exact §3 text", () => {
    fc.assert(
      fc.property(historyArb, (pairs) => {
        const rich = pairs.map(([shape, dress]) => dressed(shape, dress));
        const point = resumePoint(rich);
        if (!point.resumable) return;
        const appends = resumeAppends(point);
        if (point.kind !== "recover_tools") return;
        expect(appends).toEqual(
          point.unansweredToolCalls.map((call) => ({
            role: "tool",
            toolCallId: call.id,
            name: call.name,
            content: INTERRUPTED_LITERAL,
            success: false,
          })),
        );
        // What was appended closes every call: the next resume calls the model.
        const after = resumePoint([...rich, ...appends]);
        expect(after.resumable && after.kind).toBe("call_model");
      }),
      { numRuns: NUM_RUNS },
    );
  });

  it("the last turn decides: completed turns before it change nothing", () => {
    const completedTurnArb = fc
      .tuple(anyText, fc.uniqueArray(fc.constantFrom(...ID_POOL), { maxLength: 3 }), anyText)
      .map(([question, ids, answer]): Message[] => [
        { role: "user", content: question },
        ...(ids.length > 0
          ? [
              {
                role: "assistant" as const,
                content: "",
                toolCalls: ids.map((id) => ({ id, name: "t", arguments: {} })),
                stopReason: "tool_use",
              },
              ...ids.map((id) => ({
                role: "tool" as const,
                toolCallId: id,
                name: "t",
                content: answer,
                success: true,
              })),
            ]
          : []),
        { role: "assistant", content: answer, stopReason: "end_turn" },
      ]);
    fc.assert(
      fc.property(fc.array(completedTurnArb, { maxLength: 3 }), historyArb, (turns, pairs) => {
        const tail = pairs.map(([shape, dress]) => dressed(shape, dress));
        const prefix = turns.flat();
        expect(resumePoint(prefix).resumable || verdict(resumePoint(prefix)).outcome).not.toBe("malformed");
        if (tail.length === 0) return;
        expect(verdict(resumePoint([...prefix, ...tail]))).toEqual(verdict(resumePoint(tail)));
      }),
      { numRuns: NUM_RUNS },
    );
  });

  it("an unknown stop reason of any text is named in a bounded, storable detail", () => {
    fc.assert(
      fc.property(
        fc.oneof(
          fc.string({ unit: "grapheme", minLength: 1, maxLength: 300 }),
          fc.string({ unit: "binary", minLength: 1, maxLength: 300 }),
        ),
        (stopReason) => {
          fc.pre(!(STOP_REASONS as readonly string[]).includes(stopReason));
          const point = resumePoint([
            { role: "user", content: "hi" },
            { role: "assistant", content: "", stopReason },
          ]);
          expect(point).toEqual({
            resumable: false,
            reason: "unknown_stop",
            detail: stopReasonDetail(stopReason),
          });
          const detail = !point.resumable ? (point.detail ?? "") : "";
          if (stopReason.length <= 120) expect(detail).toBe(stopReason);
          else {
            expect(detail.length).toBeLessThan(160);
            expect(stopReason.startsWith(detail.slice(0, detail.indexOf("… (")))).toBe(true);
          }
          if (isStorableText(stopReason)) expect(isStorableText(detail)).toBe(true);
        },
      ),
      { numRuns: NUM_RUNS },
    );
  });
});

describe("wide parallel steps", () => {
  it("a step of the most calls one step may ask for is owed exactly the results that are missing, in call order", () => {
    fc.assert(
      fc.property(
        fc.uniqueArray(fc.nat({ max: MAX_TOOL_CALLS_PER_STEP - 1 }), { maxLength: 40 }),
        fc.boolean(),
        (missing, reversed) => {
          const calls: ToolCall[] = Array.from({ length: MAX_TOOL_CALLS_PER_STEP }, (_, i) => ({
            id: `call_${i}`,
            name: i % 2 ? "write_file" : "sleep",
            arguments: { i },
          }));
          const gone = new Set(missing);
          const answered = calls.filter((_, i) => !gone.has(i));
          if (reversed) answered.reverse();
          const history: Message[] = [
            { role: "user", content: "go" },
            { role: "assistant", content: "", toolCalls: calls, stopReason: "tool_use" },
            ...answered.map(
              (c): Message => ({
                role: "tool",
                toolCallId: c.id,
                name: c.name,
                content: "ok",
                success: true,
              }),
            ),
          ];
          const expected = [...gone].sort((x, y) => x - y).map((i) => `call_${i}`);
          expect(verdict(resumePoint(history))).toEqual(
            expected.length > 0
              ? { outcome: "recover_tools", owed: expected }
              : { outcome: "call_model", owed: [] },
          );
        },
      ),
      { numRuns: 60 },
    );
  });
});
