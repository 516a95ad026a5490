/**
 * Runs a delete found running (`deleted_runs`, store/data-deletion.ts) whose worker may not
 * have heard the delete: its signal (the cancel channel, deletion-cleanup.ts) is a Redis
 * publish, lost when the API answered while Redis was away, or while the worker's subscriber
 * reconnected. Before, nothing sent it again (the runs' rows went with their session): a
 * worker whose lease outlived the outage ran its tool to its end — a ten-minute tool, ten
 * minutes — and only its next write was refused (test/delete-redis-away.test.ts).
 *
 * At each wide scan, a page of those deleted more than a moment ago is looked at: a run whose
 * session's lease is still held is sent the stop again (a worker aborts a run once, whatever
 * it hears again); one whose lease is not held is forgotten. A lease goes when its job ends
 * (released), when its worker died (it lapses), or with Redis's data; in the last case the
 * worker still running takes the lease back at its next renewal, finds the session's epoch
 * gone with its row, and stops by itself (lease-keeper.ts). Nothing is resumed or run again:
 * the stop only aborts, and the worker's writes stay fenced (the session's row is gone).
 */
import type { Logger } from "pino";
import type { DeletedRun, DeletedRuns } from "../shared/store/deleted-runs.js";

export type DeletedRunStopDeps = {
  runs: Pick<DeletedRuns, "due" | "forget">;
  /** The lease holder of each session, in order (null: none) (lease.ts `holders`). */
  holders: (sessionIds: readonly string[]) => Promise<(string | null)[]>;
  /** Asks the workers to abort these runs of these sessions (worker-signals.ts `publishCancel`). */
  stopSignal: (sessionIds: string[], runIds: string[]) => Promise<void>;
  log: Pick<Logger, "warn">;
};

/** How long after its delete a run is first looked at: the delete's own signal comes first. */
const LOOK_AFTER_MS = 2_000;

/**
 * Of a page of deleted runs and their sessions' lease holders (`holders`, by session id), the
 * runs to stop again (their session's lease held) and those to forget (pure).
 */
export function stopsToSend(
  runs: readonly DeletedRun[],
  holders: ReadonlyMap<string, string | null>,
): { stop: DeletedRun[]; forget: string[] } {
  const stop: DeletedRun[] = [];
  const forget: string[] = [];
  for (const run of runs) {
    if (holders.get(run.sessionId)) stop.push(run);
    else forget.push(run.runId);
  }
  return { stop, forget };
}

export class DeletedRunStops {
  /** The last run id of the page before (pages go round the table, a scan each). */
  private after = "";
  /** Runs whose stop this sweeper sent again (logged once each), until forgotten. */
  private readonly stopped = new Set<string>();

  constructor(
    private readonly deps: DeletedRunStopDeps,
    private readonly limit = 500,
  ) {}

  /** Looks at one page; returns how many runs were sent their stop again. */
  async scan(): Promise<number> {
    const { deps } = this;
    const due = await deps.runs.due(LOOK_AFTER_MS, this.limit, this.after);
    if (due.length === 0) {
      this.after = "";
      return 0;
    }
    const sessionIds = [...new Set(due.map((run) => run.sessionId))];
    // Redis still away: nothing is known, nothing forgotten; the page is looked at again.
    const holders = await deps.holders(sessionIds).catch(() => null);
    if (holders === null) return 0;
    this.after = due.length < this.limit ? "" : due.at(-1)!.runId;
    const { stop, forget } = stopsToSend(due, new Map(sessionIds.map((id, i) => [id, holders[i] ?? null])));
    await deps.runs.forget(forget);
    for (const runId of forget) this.stopped.delete(runId);
    if (stop.length === 0) return 0;
    const sent = await deps
      .stopSignal(
        [...new Set(stop.map((run) => run.sessionId))],
        stop.map((run) => run.runId),
      )
      .then(
        () => true,
        () => false,
      );
    if (!sent) return 0;
    const fresh = stop.filter((run) => !this.stopped.has(run.runId)).map((run) => run.runId);
    for (const runId of fresh) this.stopped.add(runId);
    if (fresh.length > 0)
      deps.log.warn(
        { runIds: fresh },
        "runs of deleted sessions still run: the delete's stop was sent to the workers again (lost: Redis away?)",
      );
    return stop.length;
  }
}
