/**
 * What a queued run appends when a worker takes it (pure): for new input, the closed tool
 * calls and then the user message; for a resume, what its kind requires.
 */

import { resumePointAfter } from "../shared/history-tail.js";
import type { Message } from "../shared/messages.js";
import { interruptedResults, resumeAppends } from "../shared/resume-plan.js";
import type { ResumeKind, ResumePoint } from "../shared/resume-point.js";

export type RunStart =
  | { action: "start"; appends: Message[]; resumeKind: ResumeKind | null; interruptedCalls: string[] }
  | { action: "refuse"; outcome: "nothing_to_resume" | "malformed"; reason: string; detail?: string };

export function planRunStart(
  run: { kind: string; input: string | null },
  history: readonly Message[],
): RunStart {
  if (run.kind === "run") {
    const point: ResumePoint = resumePointAfter(history);
    if (!point.resumable && point.reason === "malformed") {
      return { action: "refuse", outcome: "malformed", reason: "malformed", detail: point.detail };
    }
    // What closeUnansweredToolCalls appends, from the point already at hand.
    const closes =
      point.resumable && point.kind === "recover_tools" ? interruptedResults(point.unansweredToolCalls) : [];
    return {
      action: "start",
      appends: [...closes, { role: "user", content: run.input ?? "" }],
      resumeKind: null,
      interruptedCalls: closes.map((c) => c.name),
    };
  }
  const point = resumePointAfter(history);
  if (!point.resumable) {
    return { action: "refuse", outcome: "nothing_to_resume", reason: point.reason, detail: point.detail };
  }
  const appends = resumeAppends(point);
  return {
    action: "start",
    appends,
    resumeKind: point.kind,
    interruptedCalls:
      point.kind === "recover_tools" ? interruptedResults(point.unansweredToolCalls).map((c) => c.name) : [],
  };
}
