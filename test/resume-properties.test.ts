import fc from "fast-check";
import { describe, expect, it } from "vitest";
import { AgentResumeError } from "../src/shared/errors.js";
import { type Message, parseHistory, type ToolCall } from "../src/shared/messages.js";
import { closeUnansweredToolCalls, resumeAppends } from "../src/shared/resume-plan.js";
import { type ResumePoint, resumePoint, toResumePointJson } from "../src/shared/resume-point.js";
import { STOP_REASONS } from "../src/shared/stop-reasons.js";

const NUM_RUNS = 300;
const INTERRUPTED_LITERAL =
  "The process stopped while this tool was running, so it may or may not have completed, and whatever it changes may or may not have happened. Check the current state before running it again.";

// ---------------------------------------------------------------------------------------
// Arbitraries
// ---------------------------------------------------------------------------------------

const ID_POOL = ["a", "b", "c", "d", "e"] as const;
const UNKNOWN_STOPS = ["stop", "max_tokens", "pause_turn", "weird", "END_TURN"] as const;

const textArb = fc.string({ maxLength: 12 });
const argsArb = fc.dictionary(
  fc.constantFrom("path", "content", "line", "ms", "name"),
  fc.oneof(
    fc.string({ maxLength: 6 }),
    fc.integer({ min: -1000, max: 1000 }),
    fc.boolean(),
    fc.constant(null),
  ),
  { maxKeys: 3 },
);
const callArb: fc.Arbitrary<ToolCall> = fc.record({
  id: fc.constantFrom(...ID_POOL),
  name: fc.constantFrom("write_file", "append_file", "sleep", "fail"),
  arguments: argsArb,
});
const callsArb = fc.uniqueArray(callArb, { maxLength: 3, selector: (c) => c.id });
const stopReasonArb = fc.oneof(
  { arbitrary: fc.constantFrom("tool_use", "end_turn"), weight: 4 },
  { arbitrary: fc.constantFrom(...STOP_REASONS), weight: 3 },
  { arbitrary: fc.constantFrom(...UNKNOWN_STOPS), weight: 1 },
  { arbitrary: fc.string({ minLength: 1, maxLength: 8 }), weight: 1 },
);

const owesResults = (stopReason: string, calls: readonly ToolCall[]) =>
  calls.length > 0 && (stopReason === "tool_use" || stopReason === "end_turn");

type Turn =
  | { type: "input"; message: Message }
  | {
      type: "step";
      content: string;
      calls: ToolCall[];
      stopReason: string;
      keep: boolean[];
      order: number[];
      success: boolean[];
      resultText: string[];
    };

const inputTurnArb: fc.Arbitrary<Turn> = fc
  .record({ role: fc.constantFrom("user" as const, "internal" as const), content: textArb })
  .map((message) => ({ type: "input", message }));
const triple = <T>(arb: fc.Arbitrary<T>) => fc.array(arb, { minLength: 3, maxLength: 3 });
const stepTurnArb: fc.Arbitrary<Turn> = fc.record({
  type: fc.constant("step" as const),
  content: textArb,
  calls: callsArb,
  stopReason: stopReasonArb,
  keep: triple(fc.boolean()),
  order: triple(fc.nat({ max: 100 })),
  success: triple(fc.boolean()),
  resultText: triple(textArb),
});

type Generated = { history: Message[]; turns: Turn[] };

/** Lays out turns as messages; every owed call is answered except, possibly, in the last turn. */
function layout(turns: Turn[]): Message[] {
  const out: Message[] = [];
  turns.forEach((turn, index) => {
    if (turn.type === "input") {
      out.push(turn.message);
      return;
    }
    const step: Message =
      turn.calls.length > 0
        ? { role: "assistant", content: turn.content, toolCalls: turn.calls, stopReason: turn.stopReason }
        : { role: "assistant", content: turn.content, stopReason: turn.stopReason };
    out.push(step);
    if (!owesResults(turn.stopReason, turn.calls)) return;
    const isLast = index === turns.length - 1;
    const answered = turn.calls
      .map((call, i) => ({ call, i }))
      .filter(({ i }) => !isLast || turn.keep[i])
      .sort((x, y) => turn.order[x.i]! - turn.order[y.i]! || x.i - y.i);
    for (const { call, i } of answered) {
      out.push({
        role: "tool",
        toolCallId: call.id,
        name: call.name,
        content: turn.resultText[i]!,
        success: turn.success[i]!,
      });
    }
  });
  return out;
}

const validHistoryArb: fc.Arbitrary<Generated> = fc
  .array(fc.oneof(inputTurnArb, stepTurnArb), { maxLength: 7 })
  .map((turns) => ({ turns, history: layout(turns) }));

/** Any schema-valid messages in any order: roles, ids and stop reasons at random. */
const anyMessageArb: fc.Arbitrary<Message> = fc.oneof(
  fc.record({ role: fc.constant("user" as const), content: textArb }),
  fc.record({ role: fc.constant("internal" as const), content: textArb }),
  fc
    .record({ content: textArb, calls: callsArb, stopReason: stopReasonArb })
    .map(
      ({ content, calls, stopReason }): Message =>
        calls.length > 0
          ? { role: "assistant", content, toolCalls: calls, stopReason }
          : { role: "assistant", content, stopReason },
    ),
  fc.record({
    role: fc.constant("tool" as const),
    toolCallId: fc.constantFrom(...ID_POOL, "zzz"),
    name: fc.constantFrom("write_file", "sleep"),
    content: textArb,
    success: fc.boolean(),
  }),
);
const anyHistoryArb = fc.array(anyMessageArb, { maxLength: 10 });

// ---------------------------------------------------------------------------------------
// An independent oracle for the valid-history arbitrary
// ---------------------------------------------------------------------------------------

function oracle(turns: Turn[]): { kind?: string; reason?: string; unanswered: string[] } {
  const last = turns.at(-1);
  if (!last) return { reason: "empty", unanswered: [] };
  if (last.type === "input") return { kind: "call_model", unanswered: [] };
  if (owesResults(last.stopReason, last.calls)) {
    const missing = last.calls.filter((_, i) => !last.keep[i]).map((c) => c.id);
    if (missing.length > 0) return { kind: "recover_tools", unanswered: missing };
    return { kind: "call_model", unanswered: [] };
  }
  const byStop: Record<string, { kind?: string; reason?: string }> = {
    end_turn: { reason: "completed" },
    tool_use: { reason: "completed" },
    paused: { kind: "call_model" },
    interrupted: { kind: "retry_response" },
    max_output: { kind: "continue_response" },
    refusal: { reason: "refused" },
    context_full: { reason: "context_full" },
  };
  // Own keys only: a stop reason such as "valueOf" is unknown, not Object.prototype's.
  const known = Object.hasOwn(byStop, last.stopReason) ? byStop[last.stopReason] : undefined;
  return { ...(known ?? { reason: "unknown_stop" }), unanswered: [] };
}

const unansweredIds = (point: ResumePoint) =>
  point.resumable ? point.unansweredToolCalls.map((c) => c.id) : [];

// ---------------------------------------------------------------------------------------
// Properties
// ---------------------------------------------------------------------------------------

describe("generated histories", () => {
  it("the valid-history arbitrary produces schema-valid, never-malformed histories", () => {
    fc.assert(
      fc.property(validHistoryArb, ({ history }) => {
        expect(parseHistory(structuredClone(history))).toEqual(history);
        const point = resumePoint(history);
        expect(point.resumable || point.reason !== "malformed").toBe(true);
      }),
      { numRuns: NUM_RUNS },
    );
  });

  it("the arbitraries reach every kind and reason", () => {
    const outcomes = (histories: Message[][]) =>
      new Set(
        histories.map((h) => {
          const p = resumePoint(h);
          return p.resumable ? p.kind : p.reason;
        }),
      );
    const valid = outcomes(
      fc.sample(
        validHistoryArb.map((g) => g.history),
        { numRuns: 800, seed: 42 },
      ),
    );
    expect([...valid].sort()).toEqual([
      "call_model",
      "completed",
      "context_full",
      "continue_response",
      "empty",
      "recover_tools",
      "refused",
      "retry_response",
      "unknown_stop",
    ]);
    const any = outcomes(fc.sample(anyHistoryArb, { numRuns: 800, seed: 42 }));
    expect(any.has("malformed")).toBe(true);
    expect(any.has("recover_tools")).toBe(true);
    expect(any.has("call_model")).toBe(true);
  });

  it("the any-history arbitrary is schema-valid", () => {
    fc.assert(
      fc.property(anyHistoryArb, (history) => {
        expect(parseHistory(structuredClone(history))).toEqual(history);
      }),
      { numRuns: NUM_RUNS },
    );
  });
});

describe("resumePoint properties", () => {
  it("(i) never throws, does not mutate, is deterministic — valid histories", () => {
    fc.assert(
      fc.property(validHistoryArb, ({ history }) => {
        const before = structuredClone(history);
        const first = resumePoint(history);
        expect(history).toEqual(before);
        expect(resumePoint(history)).toEqual(first);
        expect(toResumePointJson(resumePoint(history))).toEqual(toResumePointJson(first));
      }),
      { numRuns: NUM_RUNS },
    );
  });

  it("(i) never throws, does not mutate, is deterministic — any histories", () => {
    fc.assert(
      fc.property(anyHistoryArb, (history) => {
        const before = structuredClone(history);
        const first = resumePoint(history);
        expect(history).toEqual(before);
        expect(resumePoint(structuredClone(history))).toEqual(first);
      }),
      { numRuns: NUM_RUNS },
    );
  });

  it("matches an independent oracle on valid histories", () => {
    fc.assert(
      fc.property(validHistoryArb, ({ history, turns }) => {
        const expected = oracle(turns);
        const point = resumePoint(history);
        if (expected.kind) {
          expect(point.resumable && point.kind).toBe(expected.kind);
        } else {
          expect(!point.resumable && point.reason).toBe(expected.reason);
        }
        expect(unansweredIds(point)).toEqual(expected.unanswered);
      }),
      { numRuns: NUM_RUNS },
    );
  });

  it("(ii) resuming at any resumable point yields call_model — valid histories", () => {
    fc.assert(
      fc.property(validHistoryArb, ({ history }) => {
        const point = resumePoint(history);
        if (!point.resumable) return;
        const appends = resumeAppends(point);
        if (point.kind === "recover_tools") {
          expect(appends.map((m) => (m.role === "tool" ? m.toolCallId : "?"))).toEqual(unansweredIds(point));
          for (const m of appends) expect(m).toMatchObject({ content: INTERRUPTED_LITERAL, success: false });
        } else if (point.kind === "call_model") {
          expect(appends).toEqual([]);
        } else {
          expect(appends).toHaveLength(1);
          expect(appends[0]!.role).toBe("internal");
        }
        const after = resumePoint([...history, ...appends]);
        expect(after.resumable && after.kind).toBe("call_model");
      }),
      { numRuns: NUM_RUNS },
    );
  });

  it("(ii) resuming at any resumable point yields call_model — any histories", () => {
    fc.assert(
      fc.property(anyHistoryArb, (history) => {
        const point = resumePoint(history);
        if (!point.resumable) return;
        const after = resumePoint([...history, ...resumeAppends(point)]);
        expect(after.resumable && after.kind).toBe("call_model");
      }),
      { numRuns: NUM_RUNS },
    );
  });

  it("(iv) every resumable JSON has unansweredToolCalls as an array; (v) JSON round-trips", () => {
    fc.assert(
      fc.property(
        fc.oneof(
          validHistoryArb.map((g) => g.history),
          anyHistoryArb,
        ),
        (history) => {
          const json = toResumePointJson(resumePoint(history));
          if (json.resumable) {
            expect(Array.isArray(json.unansweredToolCalls)).toBe(true);
            expect(typeof json.description).toBe("string");
            expect(json.description.length).toBeGreaterThan(0);
            if (json.kind !== "recover_tools") expect(json.unansweredToolCalls).toEqual([]);
            else expect(json.unansweredToolCalls.length).toBeGreaterThan(0);
          } else {
            expect("kind" in json).toBe(false);
            expect("unansweredToolCalls" in json).toBe(false);
          }
          expect(JSON.parse(JSON.stringify(json))).toEqual(json);
        },
      ),
      { numRuns: NUM_RUNS },
    );
  });
});

describe("closeUnansweredToolCalls properties", () => {
  const checkClosed = (history: Message[]) => {
    const before = structuredClone(history);
    const closing = closeUnansweredToolCalls(history);
    expect(history).toEqual(before);
    const combined = [...history, ...closing];
    // (iii) existing messages are kept, unaltered and in place
    expect(combined.slice(0, history.length)).toEqual(before);
    for (const m of closing)
      expect(m).toMatchObject({ role: "tool", content: INTERRUPTED_LITERAL, success: false });
    const point = resumePoint(combined);
    expect(point.resumable && point.kind === "recover_tools").toBe(false);
    const withInput = resumePoint([...combined, { role: "user", content: "new input" }]);
    expect(withInput).toEqual({
      resumable: true,
      kind: "call_model",
      cause: "awaiting_answer",
      unansweredToolCalls: [],
    });
  };

  it("(iii) closes exactly the unanswered calls of valid histories and alters nothing", () => {
    fc.assert(
      fc.property(validHistoryArb, ({ history }) => {
        const point = resumePoint(history);
        const closing = closeUnansweredToolCalls(history);
        expect(closing.map((m) => (m.role === "tool" ? m.toolCallId : "?"))).toEqual(
          point.resumable && point.kind === "recover_tools" ? unansweredIds(point) : [],
        );
        checkClosed(history);
      }),
      { numRuns: NUM_RUNS },
    );
  });

  it("(iii) on any history: throws malformed exactly when resumePoint says malformed, else closes", () => {
    fc.assert(
      fc.property(anyHistoryArb, (history) => {
        const point = resumePoint(history);
        if (!point.resumable && point.reason === "malformed") {
          let caught: unknown;
          try {
            closeUnansweredToolCalls(history);
          } catch (error) {
            caught = error;
          }
          expect(caught).toBeInstanceOf(AgentResumeError);
          expect((caught as AgentResumeError).reason).toBe("malformed");
          return;
        }
        checkClosed(history);
      }),
      { numRuns: NUM_RUNS },
    );
  });
});
