/**
 * The jobs a worker is running, by session, and the run each is on: what a cancel's signal
 * (worker-signals.ts `cancelChannel`) aborts. A signal that names runs aborts the jobs on
 * those runs only: a message may re-open a cancelled session and its new run start on this
 * worker before the signal is read, and that run is not the cancel's. A job not on a run yet
 * (taking the lease, claiming) keeps the runs named, and is aborted if it comes to one of
 * them. A signal naming no runs (a delete's, an older API's) aborts every job of its sessions.
 */

/** One job: its abort, and the run it is on (null: none yet). */
type RunningJob = { controller: AbortController; runId: string | null; cancelledRuns: Set<string> };

/**
 * What a cancel naming `runIds` (null: every run of the session) does to a job of one of its
 * sessions on `runId` (null: on none yet) (pure): `abort` it, `remember` the runs named (the
 * job aborts if it comes to one of them), or `ignore` it (it is on another run).
 */
export function cancelAction(
  runIds: readonly string[] | null,
  runId: string | null,
): "abort" | "remember" | "ignore" {
  if (runIds === null) return "abort";
  if (runId === null) return "remember";
  return runIds.includes(runId) ? "abort" : "ignore";
}

export class RunningJobs {
  private readonly bySession = new Map<string, Set<RunningJob>>();

  /**
   * A job of `sessionId` starts, aborted through `controller`; `onRun` is told each run it
   * goes on to, `end` when it ends.
   */
  start(sessionId: string, controller: AbortController): { onRun: (runId: string) => void; end: () => void } {
    const job: RunningJob = { controller, runId: null, cancelledRuns: new Set() };
    const jobs = this.bySession.get(sessionId) ?? new Set<RunningJob>();
    this.bySession.set(sessionId, jobs.add(job));
    return {
      onRun: (runId) => {
        job.runId = runId;
        if (job.cancelledRuns.has(runId)) job.controller.abort(new Error("session cancelled"));
      },
      end: () => {
        jobs.delete(job);
        if (jobs.size === 0 && this.bySession.get(sessionId) === jobs) this.bySession.delete(sessionId);
      },
    };
  }

  /** A cancel's signal: aborts the jobs of `sessionIds` on `runIds` (null: all of their jobs). */
  cancel(sessionIds: readonly string[], runIds: readonly string[] | null): void {
    for (const id of sessionIds)
      for (const job of this.bySession.get(id) ?? []) {
        const action = cancelAction(runIds, job.runId);
        switch (action) {
          case "abort":
            job.controller.abort(new Error("session cancelled"));
            break;
          case "remember":
            for (const runId of runIds ?? []) job.cancelledRuns.add(runId);
            break;
          case "ignore":
            break;
          default:
            action satisfies never;
        }
      }
  }
}
