/**
 * Queued runs left on cancelled sessions (sweep-queries.ts `endCancelledLeftovers`) are ended
 * `cancelled`, as the cancel would have ended them: counted, their RUN_COMPLETED written, their
 * jobs removed. Before a message and a cancel racing on one session were ordered on its row,
 * such a run stayed queued for ever: its send had been answered 202, the session's resume
 * point said `running`, an explicit resume was refused, and its batch never ended.
 *
 * Runs a cancel found running that still run a moment after it (`cancelledStillRunning`) get
 * the cancel's signal to the workers again: the API's publish failed (Redis away: it answers
 * 202 all the same, the cancel being in Postgres) or the worker's subscriber was reconnecting
 * then, and before, such a run went on — its running tool to its end, its result stored, the
 * model called again — until its next tool's start was refused (test/cancel-redis-away.test.ts).
 * Sent at each round while they run, a page of them a scan (a cancel of thousands has all its
 * runs' sent, not its first page's only); a worker aborts a run once, whatever it hears again.
 */
import type { Logger } from "pino";
import type { FleetMetrics } from "../shared/metrics.js";
import { QUEUES, type RunQueues } from "../shared/queues.js";
import type { CancelledRunning, QueuedRun, SweepQueries } from "./sweep-queries.js";

export type LeftoverDeps = {
  sweeps: Pick<SweepQueries, "endCancelledLeftovers" | "cancelledStillRunning">;
  queues: Pick<RunQueues, "getJob">;
  metrics: Pick<FleetMetrics, "runs">;
  log: Pick<Logger, "warn">;
  /** Writes a run's RUN_COMPLETED (contracts §7). Absent: no events. */
  runEnded?: (sessionId: string, runId: string, outcome: "cancelled") => Promise<void>;
  /** Asks the workers to abort these runs of these sessions (worker-signals.ts `cancelChannel`). Absent: not asked again. */
  cancelSignal?: (sessionIds: string[], runIds: string[]) => Promise<void>;
};

/** How long after its cancel a run it found running may still run before it is signalled again. */
const RESIGNAL_AFTER_MS = 2_000;

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

  /** Where the next page of runs to signal again starts (undefined: from the first). */
  private resignalFrom: CancelledRunning | undefined;
  /** Runs whose cancel this sweeper signalled again (logged once each), of its last round and of this one. */
  private resignalledBefore = new Set<string>();
  private resignalledNow = new Set<string>();

  async scan(): Promise<number> {
    await this.resignal();
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

  /**
   * Sends the cancel's signal again for one page of the runs it found running that still run;
   * the pages go round them, a scan each, whether or not their runs stop (a run that never
   * stops keeps no other waiting).
   */
  private async resignal(): Promise<void> {
    const { deps } = this;
    if (!deps.cancelSignal) return;
    const { runs, next } = await deps.sweeps.cancelledStillRunning(
      RESIGNAL_AFTER_MS,
      this.limit,
      this.resignalFrom,
    );
    if (runs.length > 0) {
      const sessionIds = [...new Set(runs.map((run) => run.session_id))];
      // Best effort, as the API's: Redis still away, the page is sent again at a later scan.
      const sent = await deps
        .cancelSignal(
          sessionIds,
          runs.map((run) => run.id),
        )
        .then(
          () => true,
          () => false,
        );
      if (!sent) return;
      const fresh = runs
        .map((run) => run.id)
        .filter((id) => !this.resignalledBefore.has(id) && !this.resignalledNow.has(id));
      for (const run of runs) this.resignalledNow.add(run.id);
      if (fresh.length > 0)
        deps.log.warn(
          { runIds: fresh },
          "runs a cancel found running still run: its signal to the workers was sent again (lost: Redis away?)",
        );
    }
    this.resignalFrom = next;
    if (next) return;
    // The round is over: what it signalled is what the next one logs no more.
    this.resignalledBefore = this.resignalledNow;
    this.resignalledNow = new Set();
  }
}
