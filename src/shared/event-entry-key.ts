/**
 * The key APPEND_SCRIPT (event-scripts.ts) takes with each entry it writes: what it checks the
 * entry against before writing it.
 */
import { fingerprint, type SessionEventInput } from "./events.js";

/**
 * `event`'s key (pure): a message's fingerprint (written once, in seq order); `r:RUN_ID` for a
 * run's end and `k:PARK_ID` for a parking's SESSION_PARKED (each written once); `s:RUN_ID` for
 * a run's start; `d:RUN_ID` for the other events of a run (skipped once that run has ended or
 * another has started: a worker that lost its run writes none of them late); 0 for the rest.
 */
export function entryKey(event: SessionEventInput): string | 0 {
  switch (event.type) {
    case "MESSAGE":
      return fingerprint(event.message);
    case "RUN_COMPLETED":
      return `r:${event.runId}`;
    case "RUN_STARTED":
      return `s:${event.runId}`;
    case "SESSION_PARKED":
      return event.parkId !== undefined ? `k:${event.parkId}` : 0;
    case "MESSAGE_DELTA":
    case "TOOL_STARTED":
    case "TOOL_FINISHED":
    case "MODEL_STOPPED":
      return `d:${event.runId}`;
    default: {
      const never: never = event;
      return never;
    }
  }
}
