/**
 * The sweeper's decision for one session (pure): resume it now (with which model), park it
 * with a reason, or leave it. Bounded attempts with exponential backoff; fallback models
 * once the primary has failed `fallbackAfter` times.
 */
import type { AgentConfig, ModelConfig } from "../shared/agent-config.js";
import { assertNever, type ResumeKind, type ResumePoint } from "../shared/resume-point.js";

export type ResumePolicy = {
  /** Automatic resumes before a session is parked (`attempts_exhausted`). Default 5. */
  maxAttempts: number;
  /** Wait before the second automatic attempt; doubles each time. Default 1 s. */
  backoffBaseMs: number;
  /** Cap on that wait. Default 60 s. */
  backoffMaxMs: number;
  /** Attempts with the primary model before the agent's fallbackModels are used. Default 2. */
  fallbackAfter: number;
};

export const DEFAULT_RESUME_POLICY: ResumePolicy = {
  maxAttempts: 5,
  backoffBaseMs: 1_000,
  backoffMaxMs: 60_000,
  fallbackAfter: 2,
};

export const PARK_REASONS = [
  "refused",
  "context_full",
  "unknown_stop",
  "malformed",
  "attempts_exhausted",
  "max_output",
  "paused",
  "invalid_agent",
] as const;
export type ParkReason = (typeof PARK_REASONS)[number];

export type SweepDecision =
  | { action: "resume"; kind: ResumeKind; model?: ModelConfig; attempt: number; nextResumeAt: Date }
  | { action: "park"; reason: ParkReason; detail?: string }
  | { action: "none" };

export function resumeBackoffMs(policy: ResumePolicy, attempt: number): number {
  return Math.min(policy.backoffBaseMs * 2 ** Math.max(0, attempt - 1), policy.backoffMaxMs);
}

export function fallbackModel(
  agent: AgentConfig,
  attempts: number,
  policy: ResumePolicy,
): ModelConfig | undefined {
  const fallbacks = agent.fallbackModels ?? [];
  if (fallbacks.length === 0 || attempts < policy.fallbackAfter) return undefined;
  return fallbacks[(attempts - policy.fallbackAfter) % fallbacks.length];
}

export function decideResume(input: {
  point: ResumePoint;
  agent: AgentConfig;
  attempts: number;
  now: Date;
  policy: ResumePolicy;
}): SweepDecision {
  const { point, agent, attempts, policy } = input;
  if (!point.resumable) {
    switch (point.reason) {
      case "completed":
      case "empty":
        return { action: "none" };
      case "refused":
      case "context_full":
      case "unknown_stop":
      case "malformed":
        return { action: "park", reason: point.reason, detail: point.detail };
      default:
        return assertNever(point.reason);
    }
  }
  if (point.kind === "continue_response" && !agent.continueOnMaxOutput)
    return { action: "park", reason: "max_output" };
  if (point.kind === "call_model" && point.cause === "paused" && !agent.continueOnPause) {
    return { action: "park", reason: "paused" };
  }
  if (attempts >= policy.maxAttempts) {
    return {
      action: "park",
      reason: "attempts_exhausted",
      detail: `${attempts} automatic resumes did not complete it`,
    };
  }
  const attempt = attempts + 1;
  return {
    action: "resume",
    kind: point.kind,
    model: fallbackModel(agent, attempts, policy),
    attempt,
    nextResumeAt: new Date(input.now.getTime() + resumeBackoffMs(policy, attempt)),
  };
}
