/**
 * Queued runs left on cancelled sessions (sweep-queries.ts `endCancelledLeftovers`) are ended
 * `cancelled`, as the cancel would have ended them: counted, their RUN_COMPLETED written, their
 * jobs removed. Before a message and a cancel racing on one session were ordered on its row,
 * such a run stayed queued for ever: its send had been answered 202, the session's resume
 * point said `running`, an explicit resume was refused, and its batch never ended.
 */
import type { Logger } from "pino";
import type { FleetMetrics } from "../shared/metrics.js";
import { QUEUES, type RunQueues } from "../shared/queues.js";
import type { SweepQueries } from "./sweep-queries.js";

export type LeftoverDeps = {
  sweeps: Pick<SweepQueries, "endCancelledLeftovers">;
  queues: Pick<RunQueues, "getJob">;
  metrics: Pick<FleetMetrics, "runs">;
  log: Pick<Logger, "warn">;
  /** Writes a run's RUN_COMPLETED (contracts §7). Absent: no events. */
  runEnded?: (sessionId: string, runId: string, outcome: "cancelled") => Promise<void>;
};

/** Ends the leftovers older than `olderThanMs` (a page of at most `limit`); returns how many. */
export async function endCancelledLeftovers(
  deps: LeftoverDeps,
  olderThanMs = 5_000,
  limit = 500,
): Promise<number> {
  const ended = await deps.sweeps.endCancelledLeftovers(olderThanMs, limit);
  if (ended.length === 0) return 0;
  deps.log.warn(
    { runIds: ended.map((run) => run.id) },
    "queued runs of cancelled sessions ended cancelled, as their cancel would have",
  );
  for (const run of ended) {
    const name = run.kind === "resume" ? "resume" : "run";
    deps.metrics.runs.inc({ kind: name, outcome: "cancelled" });
    // Best effort, as after a cancel: a job left behind finds its run ended and does nothing.
    const job = await deps.queues
      .getJob(name, QUEUES.runs.jobId({ sessionId: run.session_id, runId: run.id }))
      .catch(() => undefined);
    await job?.remove().catch(() => {});
    await deps.runEnded?.(run.session_id, run.id, "cancelled").catch(() => {});
  }
  return ended.length;
}
