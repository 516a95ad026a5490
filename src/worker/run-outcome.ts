/** How a run ended (`runs.ended_reason`, the `outcome` label of `fleet_runs_total`): src/shared/run-outcomes.ts. */
import { RUN_OUTCOMES, type RunOutcome } from "../shared/run-outcomes.js";
import { isKnownStopReason } from "../shared/stop-reasons.js";

export { RUN_OUTCOMES, type RunOutcome };

/**
 * The outcome of a step that asked for no tools. `paused` is continued by the loop until
 * the pause limit; every other abnormal stop ends the run so that a resume can follow.
 */
export function outcomeOfStop(stopReason: string): RunOutcome {
  if (!isKnownStopReason(stopReason)) return "unknown_stop";
  switch (stopReason) {
    case "end_turn":
    case "tool_use":
      return "completed";
    case "paused":
      return "paused";
    case "interrupted":
      return "interrupted";
    case "max_output":
      return "max_output";
    case "refusal":
      return "refused";
    case "context_full":
      return "context_full";
    default: {
      const never: never = stopReason;
      return never;
    }
  }
}
