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
import type { QueuedRun, SweepQueries } from "./sweep-queries.js";

export type LeftoverDeps = {
  sweeps: Pick<SweepQueries, "endCancelledLeftovers">;
  queues: Pick<RunQueues, "getJob">;
  metrics: Pick<FleetMetrics, "runs">;
  log: Pick<Logger, "warn">;
  /** Writes a run's RUN_COMPLETED (contracts §7). Absent: no events. */
  runEnded?: (sessionId: string, runId: string, outcome: "cancelled") => Promise<void>;
};

/**
 * Ends the leftovers among one page of the queued runs older than `olderThanMs` (at most
 * `limit` read: a scan costs the same under any backlog, and the pages go round it scan
 * after scan); returns how many it ended.
 */
export class CancelledLeftovers {
  private after: QueuedRun | undefined;

  constructor(
    private readonly deps: LeftoverDeps,
    private readonly olderThanMs = 5_000,
    private readonly limit = 500,
  ) {}

  async scan(): Promise<number> {
    const { deps } = this;
    const { ended, next } = await deps.sweeps.endCancelledLeftovers(this.olderThanMs, this.limit, this.after);
    this.after = next;
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
}
