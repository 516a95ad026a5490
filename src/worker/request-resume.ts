/** A worker's own request for an automatic resume of the session it holds. */
import type { RunRow } from "../shared/db/schema.js";
import type { SessionJobDeps } from "./job-deps.js";

/**
 * Asks for an automatic resume (counted against the session's one limit, with backoff) and
 * queues its job; returns the run when it may start now, so this worker goes on with it.
 */
export async function requestResume(
  sessionId: string,
  deps: SessionJobDeps,
  hint: { primaryRejected?: boolean; lastSignAt?: Date } = {},
): Promise<RunRow | null> {
  const scheduled = await deps.resumes.schedule({ sessionId, trigger: "worker", ...hint });
  switch (scheduled.action) {
    case "none":
      return null;
    case "park":
      deps.log.warn({ sessionId, reason: scheduled.reason, detail: scheduled.detail }, "session parked");
      return null;
    case "resume": {
      await deps.enqueue(scheduled.run, scheduled.delayMs);
      return scheduled.delayMs === 0 ? scheduled.run : null;
    }
  }
}
