/**
 * Part 3 of a sweep (sweeper.ts): queued runs whose job Redis lost, or whose job failed for
 * good, enqueued again, a page of old queued runs per scan.
 */
import { type JobName, type JobStanding, QUEUES } from "../shared/queues.js";
import type { QueuedRun } from "./sweep-queries.js";
import type { SweeperDeps } from "./sweeper-deps.js";

export class OrphanedRuns {
  /** Where the next orphan scan reads on in a backlog longer than one page (none: the start). */
  private orphansAfter: QueuedRun | undefined;

  constructor(
    private readonly deps: Pick<SweeperDeps, "sweeps" | "queues" | "resumes" | "log" | "signal">,
    /** Runs `fn` under the session's sweep lock (sweep-locks.ts); undefined when another sweeper holds it. */
    private readonly withLock: <T>(sessionId: string, fn: () => Promise<T>) => Promise<T | undefined>,
  ) {}

  private get stopping(): boolean {
    return this.deps.signal?.aborted === true;
  }

  /**
   * Part 3: queued runs whose job Redis no longer has, or whose job failed for good. Under a
   * backlog most old queued runs are simply waiting: their jobs' standing is read in one
   * pipeline per queue, and a run that started meanwhile (its job finished because it ran)
   * is left alone — checked again in the same transaction that counts the retry.
   */
  async sweep(olderThanMs: number, limit: number): Promise<number> {
    // A page per scan, in turn: a lost job behind a backlog longer than a page is found
    // within a few scans, not once the waiting runs ahead of it have drained.
    const page = await this.deps.sweeps.queuedRunsOlderThan(olderThanMs, limit, this.orphansAfter);
    const candidates = page.runs;
    this.orphansAfter = page.next;
    const lost: { run: QueuedRun; name: JobName; state: JobStanding }[] = [];
    for (const name of ["run", "resume"] as const) {
      const mine = candidates.filter((run) => (run.kind === "resume" ? "resume" : "run") === name);
      const states = await this.deps.queues.jobStates(
        name,
        mine.map((run) => QUEUES.runs.jobId({ sessionId: run.session_id, runId: run.id })),
      );
      mine.forEach((run, i) => {
        if (states[i] !== "pending") lost.push({ run, name, state: states[i]! });
      });
    }
    if (lost.length === 0) return 0;
    const stillQueued = new Set(await this.deps.sweeps.stillQueued(lost.map(({ run }) => run.id)));
    // A lost job of an automatic resume still in its backoff waits for the rest of it.
    const backoffLeft = await this.deps.resumes.backoffLeftMs(
      lost
        .filter(({ run, state }) => state === "missing" && stillQueued.has(run.id))
        .map(({ run }) => run.id),
    );
    let count = 0;
    for (const { run, name, state } of lost) {
      if (this.stopping) break;
      if (!stillQueued.has(run.id)) continue;
      const jobId = QUEUES.runs.jobId({ sessionId: run.session_id, runId: run.id });
      // A job Redis lost is re-added as it was (delayed by what remains of its backoff, on
      // Postgres's clock); a job that failed for good or ended without starting its run is a
      // retry, and counts against the session's one limit.
      if (state === "finished") {
        // Under the session's sweep lock, the job's standing read again: another sweeper that
        // read it `finished` too may have retried it meanwhile, and counted it (test/orphaned-runs-two-sweepers.test.ts).
        if (await this.withLock(run.session_id, () => this.retry(run, name, jobId))) count++;
        continue;
      }
      const delayMs = backoffLeft.get(run.id) ?? 0;
      await this.deps.queues.enqueue(name, { sessionId: run.session_id, runId: run.id }, { delayMs });
      count++;
      this.deps.log.info({ runId: run.id, state, delayMs }, "queued run re-enqueued");
    }
    return count;
  }

  /** A run whose job ended without starting it: a retry, counted against the session's one limit. */
  private async retry(run: QueuedRun, name: JobName, jobId: string): Promise<boolean> {
    const [state] = await this.deps.queues.jobStates(name, [jobId]);
    if (state !== "finished") return false;
    // The attempt is this finished job (the one added again has a time of its own): a count
    // whose answer was lost finds it still here, counted already, at the next scan.
    const job = await this.deps.queues.getJob(name, jobId);
    const counted = await this.deps.resumes.countRetry(run.session_id, run.id, `${jobId}@${job?.timestamp}`);
    if (counted.action === "none") return false;
    if (counted.action === "park") {
      this.deps.log.warn(
        { sessionId: run.session_id, runId: run.id, detail: counted.detail },
        "session parked",
      );
      return false;
    }
    const { delayMs } = counted;
    await job?.remove().catch(() => {});
    await this.deps.queues.enqueue(name, { sessionId: run.session_id, runId: run.id }, { delayMs });
    this.deps.log.info({ runId: run.id, state, delayMs }, "queued run re-enqueued");
    return true;
  }
}
