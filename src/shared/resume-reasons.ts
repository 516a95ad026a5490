/**
 * The vocabulary of the resume contract (contracts.md §2), in a file of its own so that
 * both the classifier (`resume-point.ts`) and the error it raises (`errors.ts`) can name
 * it without importing each other.
 */
export const RESUME_KINDS = ["call_model", "recover_tools", "retry_response", "continue_response"] as const;
export type ResumeKind = (typeof RESUME_KINDS)[number];

export const NOT_RESUMABLE_REASONS = [
  "completed",
  "refused",
  "context_full",
  "unknown_stop",
  "empty",
  "malformed",
] as const;
export type NotResumableReason = (typeof NOT_RESUMABLE_REASONS)[number];

/**
 * Why the fleet refuses a resume: the history's reason, or `running` (contracts §12, an
 * additive reason) while a run of the session is queued or running.
 */
export type RefusalReason = NotResumableReason | "running";
