/**
 * Normalised stop reasons (resume-semantics.md §1 and §6).
 *
 * Providers map their own values onto these. Any other value is stored verbatim and
 * classified as unknown (`unknown_stop`), so a provider that invents a new reason never
 * gets silently treated as a normal answer.
 */
export const STOP_REASONS = [
  "end_turn",
  "tool_use",
  "paused",
  "interrupted",
  "max_output",
  "refusal",
  "context_full",
] as const;

export type StopReason = (typeof STOP_REASONS)[number];

export function isKnownStopReason(value: string): value is StopReason {
  return (STOP_REASONS as readonly string[]).includes(value);
}

/** The `stop_reason` label of `fleet_model_stops_total`: unknown values become `other`. */
export function stopReasonLabel(value: string): StopReason | "other" {
  return isKnownStopReason(value) ? value : "other";
}

/** True when the model stopped normally: the step is whole and nothing is missing. */
export function isNormalStop(value: string): boolean {
  return value === "end_turn" || value === "tool_use";
}

/** Anthropic Messages API `stop_reason` → normalised (unknown values kept verbatim). */
export function fromAnthropicStopReason(value: string): string {
  switch (value) {
    case "end_turn":
    case "stop_sequence":
      return "end_turn";
    case "tool_use":
      return "tool_use";
    case "pause_turn":
      return "paused";
    case "max_tokens":
      return "max_output";
    case "refusal":
      return "refusal";
    case "model_context_window_exceeded":
      return "context_full";
    default:
      return value;
  }
}

/** OpenAI-compatible chat completions `finish_reason` → normalised (unknown values kept verbatim). */
export function fromOpenAIFinishReason(value: string): string {
  switch (value) {
    case "stop":
      return "end_turn";
    case "tool_calls":
    case "function_call":
      return "tool_use";
    case "length":
      return "max_output";
    case "content_filter":
      return "refusal";
    default:
      return value;
  }
}
