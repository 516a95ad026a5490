import { lastSignOf } from "../shared/crash-clock.js";
import { FencedError } from "../shared/errors.js";
import { SessionEventLog } from "../shared/session-event-log.js";
import type { Fence } from "../shared/store/fenced-writes.js";
import { type RideoutDeps, rideOut } from "./db-rideout.js";
import { HandedBack } from "./hand-back.js";
import type { JobResult, SessionJobDeps } from "./job-deps.js";
import { recordJobFailure } from "./job-failure.js";
import { guardedWrites, LeaseGuard } from "./lease-guard.js";
import { keepLease } from "./lease-keeper.js";
import { FIRST_RUN_TAIL, processRun } from "./process-run.js";
import { requestResume } from "./request-resume.js";
import { ridingOutWrites } from "./rideout-writes.js";
import { followingEventsSetting } from "./run-events.js";
import type { SessionState } from "./run-state.js";

export type { JobResult, SessionJobDeps };

/**
 * How long a write or tool start waits for a lapsed lease to be proven again (Redis
 * unreachable: a failover, a restart) before the job stops as fenced.
 */
export const LEASE_OUTAGE_WAIT_MS = 60_000;

export async function processSessionJob(
  sessionId: string,
  signal: AbortSignal,
  deps: SessionJobDeps,
  /** Told each run the job goes on to (a cancel's signal aborts the runs it names: running-jobs.ts). */
  onRun?: (runId: string) => void,
): Promise<JobResult> {
  // The guard is fed with the monotonic time each request was sent (lease-guard.ts), and
  // checked before every write and every tool start of this job. While Redis is unreachable
  // a write or tool start waits for a renewal to prove the lease again (lease-keeper.ts).
  const { leaseWaits, leaseRetakes } = deps.metrics;
  const guard = new LeaseGuard(sessionId, deps.leaseTtlMs, {
    waitMs: LEASE_OUTAGE_WAIT_MS,
    ...(leaseWaits ? { onWaited: (seconds, result) => leaseWaits.observe({ result }, seconds) } : {}),
  });
  const acquireSentAt = guard.stamp();
  const taken = deps.lease.take
    ? await deps.lease.take(sessionId, deps.workerId)
    : { token: await deps.lease.acquire(sessionId, deps.workerId), lastRenewal: null };
  if (!taken?.token) return "busy";
  const { token } = taken;
  guard.confirmed(acquireSentAt);
  const controller = new AbortController();
  const onOuterAbort = () => controller.abort(signal.reason);
  signal.addEventListener("abort", onOuterAbort, { once: true });
  // Aborted while the lease was being taken (a cancel, a shutdown): the event has been and gone.
  if (signal.aborted) controller.abort(signal.reason);
  // A run's writes ride out a short Postgres outage (db-rideout.ts): each try goes through
  // the guard and the fence, and the job's abort (shutdown, cancel, lost lease) ends it.
  const { dbRideouts } = deps.metrics;
  const rideout: RideoutDeps = {
    windowMs: deps.dbRideoutMs ?? 0,
    signal: controller.signal,
    sleep: deps.sleep,
    sessionId,
    log: deps.log,
    ...(dbRideouts ? { onResult: (result) => dbRideouts.inc({ result }) } : {}),
  };
  const writes = ridingOutWrites(guardedWrites(deps.writes, guard), rideout);
  let claimedEpoch: number | null = null;
  const holdsEpoch = deps.writes.holdsEpoch?.bind(deps.writes);
  const stopRenewals = keepLease({
    sessionId,
    token,
    ttlMs: deps.leaseTtlMs,
    lease: deps.lease,
    guard,
    epoch: () => claimedEpoch,
    ...(holdsEpoch ? { holdsEpoch } : {}),
    ...(leaseRetakes ? { onRetaken: (result) => leaseRetakes.inc({ result }) } : {}),
    onLost: (reason) => controller.abort(new Error(reason)),
    log: deps.log,
  });
  /** The run this job is on (for the log line of a fenced-out job). */
  let currentRun: string | null = null;
  // The history an earlier job of this worker left (history-cache.ts): this job owns it now,
  // and puts back the history it ends with (only committed messages are ever pushed onto it).
  let history = deps.histories?.take(sessionId);
  let events: SessionEventLog | null = null;
  /** Whether the job ended its work (not fenced, handed back or failed): see `afterJob`. */
  let done = true;
  try {
    // The first run of a new session starts in the claim's own statement (session-claims.ts).
    const claim = await writes.claimSession(sessionId, deps.workerId, {
      startFirst: { tail: FIRST_RUN_TAIL },
      ...(history ? { known: history } : {}),
    });
    history = claim?.history;
    if (claim === null) return "done";
    claimedEpoch = claim.epoch;
    deps.metrics.historyMessagesRead?.inc(claim.historyRead);
    const fence: Fence = { sessionId, epoch: claim.epoch };
    const runBySeq = new Map<number, string>();
    // A session with `sessionEvents: false` has no stream: none is written for it. Read with the
    // claim, and again by every append of this job (PATCH /v1/sessions/:id may change it).
    events = deps.events
      ? new SessionEventLog(
          deps.events,
          sessionId,
          claim.history,
          (m) => runBySeq.get(m.seq) ?? null,
          (error) =>
            deps.log.warn({ err: error, sessionId }, "writing session events failed; retried with the next"),
          // A session with no message has none in its stream either: no need to ask Redis.
          claim.history.length === 0 ? 0 : null,
          claim.sessionEvents,
        )
      : null;
    const runDeps = runDepsOf(deps, events ? followingEventsSetting(writes, events) : writes, guard, rideout);
    for (const { kind, outcome } of claim.staleRuns) deps.metrics.runs.inc({ kind, outcome });
    // The runs this claim ended: their messages the stream lacks first, then their ends.
    if (events && claim.staleRuns.length > 0)
      await events.emitBounded(
        claim.staleRuns.map(({ id: runId, outcome }) => ({ type: "RUN_COMPLETED", runId, outcome })),
      );
    let next = claim.next;
    if (claim.staleRunIds.length > 0 && !next) {
      // The previous holder crashed, froze, or this job is the queue's retry of a job that
      // failed: the resume that follows is an automatic one, counted like the sweeper's, and
      // timed like it (fleet_crash_to_resume_seconds) from the earlier holder's last sign of
      // life: its last append or claim, or its last lease renewal when that came later.
      const lastSignAt = lastSignOf(claim.staleSignAt, taken.lastRenewal);
      next = await requestResume(sessionId, deps, lastSignAt ? { lastSignAt } : {});
    }
    if (!next) return "done";
    // Read once, with the claim: while this worker holds the lease, only it appends, so the
    // in-memory history stays exactly the stored one from run to run.
    const state: SessionState = {
      fence,
      history: claim.history,
      agent: claim.agent,
      parsedAgent: null,
      budget: { tokensUsed: claim.tokensUsed },
      events,
      runBySeq,
    };
    let started = claim.started;
    // A run the claim started is taken to its end even when the job was aborted meanwhile.
    while (next && (started !== null || !controller.signal.aborted)) {
      currentRun = next.id;
      onRun?.(next.id);
      next = await processRun(next, state, controller.signal, runDeps, started);
      started = null;
    }
    return "done";
  } catch (error) {
    done = false;
    if (error instanceof HandedBack) {
      // A newer release's agent was said so where it was handed back (newer-agent-wait.ts).
      if (error.why === "capacity")
        deps.log.info(
          { sessionId, runId: error.runId, delayMs: error.delayMs },
          "run handed back: waiting for capacity",
        );
      return { handedBack: error.delayMs };
    }
    if (error instanceof FencedError) {
      deps.metrics.fencedWrites.inc();
      deps.log.warn(
        { sessionId, ...(currentRun ? { runId: currentRun } : {}), reason: error.message },
        "fenced out: this worker lost the lease; stopping",
      );
      return "fenced";
    }
    // A fault the run did not turn into an outcome: its run stays `running` for the next claim
    // or the sweeper to end `crashed`, as before, but with the reason written on it now.
    if (currentRun !== null && claimedEpoch !== null)
      await recordJobFailure(deps.writes, guard, { sessionId, epoch: claimedEpoch }, currentRun, error);
    throw error;
  } finally {
    if (history) deps.histories?.put(sessionId, history);
    stopRenewals();
    signal.removeEventListener("abort", onOuterAbort);
    // The job's events go before the lease: once it is released another worker may take the
    // session and write the next run's events, which must come after these. A job that ended
    // its work hands this off (`afterJob`), so that its slot takes the next job now.
    const closing = closeJob(events, () => deps.lease.release(sessionId, token));
    if (done && deps.afterJob) deps.afterJob(closing);
    else await closing;
  }
}

/**
 * What the job's runs get (one object a job, made once its writes are final): the worker's
 * deps with the job's guarded writes, its lease guard, and a cancel check that rides out a
 * short Postgres outage as the writes do. The worker's deps are its prototype, not copied:
 * a copy of their ~30 fields (two, before) was a kilobyte or more a job that lived as long as
 * the job, and nothing enumerates a job's deps (docs/performance.md, 7 December).
 */
function runDepsOf(
  deps: SessionJobDeps,
  writes: SessionJobDeps["writes"],
  guard: LeaseGuard,
  rideout: RideoutDeps,
): SessionJobDeps {
  const runDeps: SessionJobDeps = Object.create(deps);
  runDeps.writes = writes;
  runDeps.leaseGuard = guard;
  const cancelled = deps.cancelled;
  if (cancelled)
    runDeps.cancelled = (fence: Fence, runId: string) =>
      rideOut("cancel check", () => cancelled(fence, runId), rideout);
  return runDeps;
}

/** The job's pending event writes (at most 1 s), then the lease's release; never rejects. */
async function closeJob(events: SessionEventLog | null, release: () => Promise<boolean>): Promise<void> {
  await events?.settled();
  await release().catch(() => {});
}
