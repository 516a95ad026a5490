/** The pure decision behind every automatic resume (resume-policy.ts): table-driven. */
import { describe, expect, it } from "vitest";
import { type AgentConfig, parseAgentConfig } from "../src/shared/agent-config.js";
import type { Message, StoredMessage } from "../src/shared/messages.js";
import { INTERRUPTED_TOOL_TEXT } from "../src/shared/resume-plan.js";
import { resumePoint } from "../src/shared/resume-point.js";
import {
  continuedWithText,
  DEFAULT_RESUME_POLICY,
  decideResume,
  HANDOVERS_PER_ATTEMPT,
  progressMark,
  type ResumeInput,
  resumePolicyOf,
} from "../src/shared/resume-policy.js";

const NOW = new Date("2026-12-01T12:00:00Z");
const agent: AgentConfig = parseAgentConfig({ model: { provider: "scripted", steps: [{ text: "x" }] } });
const policy = { ...DEFAULT_RESUME_POLICY, maxAttempts: 3, backoffBaseMs: 1_000 };
const awaiting: Message[] = [{ role: "user", content: "hi" }];

function input(over: Partial<ResumeInput> = {}): ResumeInput {
  return {
    point: resumePoint(awaiting),
    agent,
    attempts: 0,
    progressed: false,
    nextResumeAt: null,
    lastOutcome: null,
    now: NOW,
    policy,
    ...over,
  };
}

describe("continuedWithText", () => {
  const stored = (messages: Message[]): StoredMessage[] =>
    messages.map((m, i) => ({ ...m, seq: i + 1, createdAt: NOW.toISOString() }));
  const cut = (content: string): Message => ({ role: "assistant", content, stopReason: "max_output" });
  const asked: Message[] = [{ role: "user", content: "a long story" }, cut("Once")];

  it("a step cut by the output limit after the attempt point, with text, is progress", () => {
    const history = stored([...asked, { role: "internal", content: "continue" }, cut(" upon")]);
    expect(continuedWithText(history, 2)).toBe(true);
    // Counted at that very step (a lost job's retry, a crash before the next one stored): none.
    expect(continuedWithText(history, 4)).toBe(false);
  });

  it("an empty or blank part, or any other ending, is not", () => {
    for (const text of ["", " \n\t "])
      expect(continuedWithText(stored([...asked, { role: "internal", content: "go" }, cut(text)]), 2)).toBe(
        false,
      );
    const broken: Message = { role: "assistant", content: " upon a", stopReason: "interrupted" };
    expect(continuedWithText(stored([...asked, { role: "internal", content: "go" }, broken]), 2)).toBe(false);
    expect(continuedWithText(stored([...asked, { role: "internal", content: "go" }]), 2)).toBe(false);
  });
});

describe("decideResume", () => {
  it("parks max_turns once a request's automatic continuations reach maxTurns", () => {
    const point = resumePoint([
      { role: "user", content: "x" },
      { role: "assistant", content: "y", stopReason: "max_output" },
    ]);
    const limited = { ...agent, maxTurns: 4 };
    expect(decideResume(input({ point, agent: limited, continuations: 3, progressed: true }))).toMatchObject({
      action: "resume",
      kind: "continue_response",
      attempt: 1,
    });
    expect(decideResume(input({ point, agent: limited, continuations: 4, progressed: true }))).toEqual({
      action: "park",
      reason: "max_turns",
      detail: "4 automatic continuations of a response cut by the output limit (maxTurns 4)",
    });
    // Other points are not continuations.
    expect(decideResume(input({ agent: limited, continuations: 4 }))).toMatchObject({ action: "resume" });
  });

  it("parks max_turns once a request's automatic resumes of any kind reach maxTurns, progress or not", () => {
    const limited = { ...agent, maxTurns: 4 };
    expect(decideResume(input({ agent: limited, automaticResumes: 3, progressed: true }))).toMatchObject({
      action: "resume",
      kind: "call_model",
      attempt: 1,
    });
    expect(decideResume(input({ agent: limited, automaticResumes: 4, progressed: true }))).toEqual({
      action: "park",
      reason: "max_turns",
      detail: "4 automatic resumes since the latest run asked for (maxTurns 4)",
    });
  });

  it("the first automatic resume starts now, and the next one waits out the backoff", () => {
    const first = decideResume(input());
    expect(first).toMatchObject({ action: "resume", kind: "call_model", attempt: 1, runAt: NOW });
    expect(first.action === "resume" && first.nextResumeAt.getTime() - NOW.getTime()).toBe(1_000);

    const later = new Date(NOW.getTime() + 400);
    const second = decideResume(input({ attempts: 1, nextResumeAt: later }));
    expect(second).toMatchObject({ action: "resume", attempt: 2, runAt: later });
    expect(second.action === "resume" && second.nextResumeAt.getTime() - later.getTime()).toBe(2_000);
  });

  it("counts resumes that made no progress, and parks with the last real reason past the limit", () => {
    const parked = decideResume(input({ attempts: 3, lastOutcome: "crashed" }));
    expect(parked).toEqual({
      action: "park",
      reason: "attempts_exhausted",
      detail: "3 automatic resumes made no progress; the last run ended crashed",
    });
  });

  it("a hand-over by a stopping worker starts now and counts no attempt, up to maxHandovers", () => {
    const backoff = new Date(NOW.getTime() + 30_000);
    const stop = { handover: true, lastOutcome: "cancelled", nextResumeAt: backoff } as const;
    // At the limit of crashes, with a crash's backoff running: the stop is not one more.
    const free = decideResume(input({ ...stop, attempts: 3, handovers: policy.maxHandovers }));
    expect(free).toEqual({
      action: "resume",
      kind: "call_model",
      attempt: 3,
      runAt: NOW,
      nextResumeAt: backoff,
      handover: "free",
    });
    // Past maxHandovers a hand-over counts like a crash: its backoff, then the park.
    const counted = decideResume(input({ ...stop, attempts: 1, handovers: policy.maxHandovers + 1 }));
    expect(counted).toMatchObject({ action: "resume", attempt: 2, runAt: backoff, handover: "counted" });
    expect(decideResume(input({ ...stop, attempts: 3, handovers: policy.maxHandovers + 1 }))).toEqual({
      action: "park",
      reason: "attempts_exhausted",
      detail: `3 automatic resumes made no progress; the last run ended cancelled, past ${policy.maxHandovers + 1} hand-overs by stopping workers`,
    });
    // maxTurns bounds hand-overs with every other automatic resume of the request.
    expect(decideResume(input({ ...stop, handovers: 1, automaticResumes: agent.maxTurns }))).toMatchObject({
      action: "park",
      reason: "max_turns",
    });
    // A crash after hand-overs counts as before.
    expect(decideResume(input({ attempts: 3, handovers: 4, lastOutcome: "crashed" }))).toMatchObject({
      action: "park",
      reason: "attempts_exhausted",
    });
    // The fleet's bound: HANDOVERS_PER_ATTEMPT times SWEEPER_MAX_ATTEMPTS.
    expect(resumePolicyOf({ sweeperMaxAttempts: 2, sweeperBackoffMs: 100 }).maxHandovers).toBe(
      2 * HANDOVERS_PER_ATTEMPT,
    );
  });

  it("a resume that made progress starts the count again: attempt 1, now, the primary model", () => {
    const fallback = { provider: "scripted" as const, steps: [{ text: "fallback" }] };
    const withFallback = { ...agent, fallbackModels: [fallback] };
    const stuck = decideResume(input({ agent: withFallback, attempts: 2 }));
    expect(stuck).toMatchObject({ action: "resume", attempt: 3, model: fallback });
    const moved = decideResume(
      input({
        agent: withFallback,
        attempts: 3,
        progressed: true,
        nextResumeAt: new Date(NOW.getTime() + 60_000),
      }),
    );
    expect(moved).toMatchObject({ action: "resume", attempt: 1, runAt: NOW });
    expect(moved.action === "resume" && moved.model).toBeUndefined();
  });

  it("a primary its provider rejected for good: the first fallback at once, counted as the primary's attempts", () => {
    const [f0, f1] = [0, 1].map((i) => ({
      provider: "scripted" as const,
      steps: [{ text: `fallback ${i}` }],
    }));
    const withFallbacks = { ...agent, fallbackModels: [f0!, f1!] };
    const roomy = { ...policy, maxAttempts: 5 };
    // fallbackAfter (2) attempts are taken as made: this is attempt 3, now, on the first fallback.
    const first = decideResume(input({ agent: withFallbacks, policy: roomy, primaryRejected: true }));
    expect(first).toMatchObject({ action: "resume", attempt: 3, runAt: NOW, model: f0 });
    // The next automatic resume (the sweeper's, with no hint) goes on along the fallbacks.
    expect(decideResume(input({ agent: withFallbacks, policy: roomy, attempts: 3 }))).toMatchObject({
      attempt: 4,
      model: f1,
    });
    // Later in the count, the rotation goes on from where it is.
    expect(
      decideResume(input({ agent: withFallbacks, policy: roomy, attempts: 3, primaryRejected: true })),
    ).toMatchObject({ attempt: 4, model: f1 });
    // A limit at or below fallbackAfter still leaves this attempt (on a fallback), and only it.
    const tight = { ...policy, maxAttempts: 2 };
    const last = decideResume(input({ agent: withFallbacks, policy: tight, primaryRejected: true }));
    expect(last).toMatchObject({ action: "resume", attempt: 2, model: f0 });
    expect(decideResume(input({ agent: withFallbacks, policy: tight, attempts: 2 }))).toMatchObject({
      action: "park",
      reason: "attempts_exhausted",
    });
    // Without fallback models the hint changes nothing (the worker parks such a session itself).
    expect(decideResume(input({ primaryRejected: true }))).toEqual(decideResume(input()));
    // Past the limit it parks, hint or not.
    expect(decideResume(input({ agent: withFallbacks, attempts: 3, primaryRejected: true }))).toMatchObject({
      action: "park",
      reason: "attempts_exhausted",
    });
  });

  it("the model a caller's resume named stands in for the primary, until the fallbacks take over", () => {
    const asked = { provider: "scripted" as const, steps: [{ text: "asked" }] };
    const fallback = { provider: "scripted" as const, steps: [{ text: "fallback" }] };
    expect(decideResume(input({ askedModel: asked }))).toMatchObject({ action: "resume", model: asked });
    expect(decideResume(input({ askedModel: asked, attempts: 1 }))).toMatchObject({ model: asked });
    const withFallback = { ...agent, fallbackModels: [fallback] };
    expect(decideResume(input({ agent: withFallback, askedModel: asked, attempts: 1 }))).toMatchObject({
      model: asked,
    });
    expect(decideResume(input({ agent: withFallback, askedModel: asked, attempts: 2 }))).toMatchObject({
      model: fallback,
    });
  });

  it("parks the endings a resume cannot change, and leaves completed and empty sessions alone", () => {
    const refused: Message[] = [...awaiting, { role: "assistant", content: "no", stopReason: "refusal" }];
    expect(decideResume(input({ point: resumePoint(refused) }))).toMatchObject({
      action: "park",
      reason: "refused",
    });
    const done: Message[] = [...awaiting, { role: "assistant", content: "ok", stopReason: "end_turn" }];
    expect(decideResume(input({ point: resumePoint(done) }))).toEqual({ action: "none" });
    expect(decideResume(input({ point: resumePoint([]) }))).toEqual({ action: "none" });
  });

  it("parks max_output and paused when the agent turns continuation off", () => {
    const cut: Message[] = [...awaiting, { role: "assistant", content: "long", stopReason: "max_output" }];
    const noContinue = { ...agent, continueOnMaxOutput: false };
    expect(decideResume(input({ agent: noContinue, point: resumePoint(cut) }))).toEqual({
      action: "park",
      reason: "max_output",
    });
    expect(decideResume(input({ point: resumePoint(cut) }))).toMatchObject({ kind: "continue_response" });
  });

  it("resumes a paused or cut step whose run crashed after storing it: the agent's word is for a run that ended there", () => {
    const paused: Message[] = [...awaiting, { role: "assistant", content: "Looking.", stopReason: "paused" }];
    const cut: Message[] = [...awaiting, { role: "assistant", content: "long", stopReason: "max_output" }];
    const noContinue = { ...agent, continueOnPause: false, continueOnMaxOutput: false };
    // The run ended at the stop (the pause limit, the output limit): parked, as the agent says.
    expect(
      decideResume(input({ agent: noContinue, point: resumePoint(paused), lastOutcome: "paused" })),
    ).toEqual({ action: "park", reason: "paused" });
    expect(
      decideResume(input({ agent: noContinue, point: resumePoint(cut), lastOutcome: "max_output" })),
    ).toEqual({ action: "park", reason: "max_output" });
    // The worker died after storing the step (a pause below the limit, continued by the loop):
    // the run ended crashed or stalled, and is resumed like any crash.
    for (const lastOutcome of ["crashed", "stalled"]) {
      expect(
        decideResume(input({ agent: noContinue, point: resumePoint(paused), lastOutcome })),
      ).toMatchObject({ action: "resume", kind: "call_model", attempt: 1 });
      expect(decideResume(input({ agent: noContinue, point: resumePoint(cut), lastOutcome }))).toMatchObject({
        action: "resume",
        kind: "continue_response",
      });
    }
  });

  describe("progressMark", () => {
    const a = (id: string) => ({ id, name: "append_file", arguments: { path: "log", line: "x" } });
    const poison = (id: string) => ({ id, name: "deploy", arguments: { env: "prod" } });
    const step = (n: number): Message[] => [
      { role: "assistant", content: "", toolCalls: [a(`a${n}`), poison(`p${n}`)], stopReason: "tool_use" },
      { role: "tool", toolCallId: `a${n}`, name: "append_file", content: "ok", success: true },
    ];
    it("is the same when a worker dies again at the same call, under new ids, after other calls ran again", () => {
      const first = [...awaiting, ...step(1)];
      const again: Message[] = [
        ...first,
        { role: "tool", toolCallId: "p1", name: "deploy", content: INTERRUPTED_TOOL_TEXT, success: false },
        ...step(2),
      ];
      expect(progressMark(again)).toBe(progressMark(first));
    });
    it("differs once the session moved: the call was answered, or another call is pending", () => {
      const first = [...awaiting, ...step(1)];
      const answered: Message[] = [
        ...first,
        { role: "tool", toolCallId: "p1", name: "deploy", content: "done", success: true },
      ];
      expect(progressMark(answered)).not.toBe(progressMark(first));
      const other: Message[] = [
        ...awaiting,
        {
          role: "assistant",
          content: "",
          toolCalls: [{ ...poison("q"), arguments: { env: "staging" } }],
          stopReason: "tool_use",
        },
      ];
      expect(progressMark(other)).not.toBe(progressMark(first));
    });
  });
});
