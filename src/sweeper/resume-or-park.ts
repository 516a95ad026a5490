/**
 * What the sweeper does, under the session's sweep lock, with a session whose run it ended
 * (its worker crashed or stalled) or that it found interrupted: resume it or park it.
 */
import { lastSignOf } from "../shared/crash-clock.js";
import type { SweeperDeps } from "./sweeper-deps.js";

export type Cause = "crashed" | "stalled" | "interrupted";

/**
 * Decides for one session under its lock: the decision itself (resume with backoff, or
 * park) is AutomaticResumes', the one place every automatic resume is counted.
 */
export async function resumeOrPark(
  deps: Pick<SweeperDeps, "queries" | "resumes" | "queues" | "log">,
  sessionId: string,
  cause: Cause,
  lastRenewal: number | null,
): Promise<"resumed" | "parked" | "none"> {
  let lastSignAt: Date | undefined;
  if (cause !== "interrupted") {
    const session = await deps.queries.getSession(sessionId);
    if (!session) return "none";
    lastSignAt = lastSignOf(session.lastActiveAt, lastRenewal);
  }
  const scheduled = await deps.resumes.schedule({ sessionId, trigger: "sweeper", lastSignAt });
  switch (scheduled.action) {
    case "none":
      return "none";
    case "park":
      deps.log.warn({ sessionId, reason: scheduled.reason, detail: scheduled.detail }, "session parked");
      return "parked";
    case "resume": {
      const { run, delayMs, attempt } = scheduled;
      await deps.queues.enqueue("resume", { sessionId, runId: run.id }, { delayMs });
      deps.log.info(
        { sessionId, runId: run.id, kind: run.resumeKind, cause, attempt, delayMs },
        "resume enqueued",
      );
      return "resumed";
    }
  }
}
