/**
 * The sweeper finds interrupted sessions and enqueues their resumes, or parks them with a
 * reason. Several may run: each acts on a session only under a short Redis lock, re-reads
 * the state after taking it, and a unique index allows one waiting resume per session.
 *
 * What it looks for, each tick:
 * 1. runs whose worker died (its liveness connection is gone: within milliseconds of a
 *    SIGKILL) or froze (its session lease expired): the run ends `crashed`/`stalled`, the
 *    lease of a dead holder is removed, and the session is resumed at once;
 * 2. active sessions whose history is not a completed answer, with nothing queued or
 *    running, once their backoff has passed: resumed, or parked when the policy says so;
 * 3. queued runs whose job is missing (Redis lost it) or failed: the job is added again.
 * (4. jobs claimed by a worker that died before starting them; 5. parkings never announced.)
 * It also wakes up when a worker reports an abnormal stop, instead of waiting for a poll.
 * Part 1's read of the running runs also tells `progress` how long each went without an
 * append: a run whose live worker waits forever (a tool) is not resumed, only shown (run-progress.ts).
 */
import { ownerOf } from "../shared/lease.js";
import { PARK_ANNOUNCE_GRACE_MS } from "../shared/store/park-announcements.js";
import { DeadClaims } from "./dead-claims.js";
import { forEachLimit } from "./for-each-limit.js";
import { leaseJudgeable, slowAnswer } from "./lease-judgement.js";
import { DeathWatch, livenessMode, liveWorkers } from "./liveness.js";
import { OrphanedRuns } from "./orphaned-runs.js";
import { RedisDataLoss } from "./redis-data-loss.js";
import { type Cause, resumeOrPark } from "./resume-or-park.js";
import { SessionFailures } from "./session-failures.js";
import { SweepLocks } from "./sweep-locks.js";
import type { AbandonedRunEnd } from "./sweep-queries.js";
import type { SweeperDeps, SweepResult } from "./sweeper-deps.js";

export { leaseJudgeable, slowAnswer } from "./lease-judgement.js";
export type { SweeperDeps, SweepResult } from "./sweeper-deps.js";

/** The owner part of the token the sweeper holds a session's lease with while it ends a run. */
const SWEEPER_OWNER = "sweeper";

/** Abandoned runs handled at once (each is a handful of round trips under its own lock). */
const ABANDONED_AT_ONCE = 8;

export class Sweeper {
  private readonly deaths: DeathWatch;
  /** When this sweeper last saw Redis fail, answer slowly, or come back (its clock). */
  private redisTroubleAt = Number.NEGATIVE_INFINITY;
  private readonly startTroubleAt: number;
  /** Part 3, with where its next scan reads on (orphaned-runs.ts). */
  private readonly orphans: OrphanedRuns;
  /** Part 4, with its own death watch of the workers that hold jobs (dead-claims.ts). */
  private readonly deadClaims: DeadClaims;
  /** Sessions whose sweep failed, and warning about it once each (session-failures.ts). */
  private readonly failures: SessionFailures;
  private readonly now: () => number;
  private readonly confirmDeathMs: number;
  private readonly locks: SweepLocks;
  private readonly dataLoss: RedisDataLoss;
  private readonly parkAnnounceGraceMs: number;

  constructor(
    private readonly deps: SweeperDeps,
    /**
     * `startGraceMs`: how long after its start no missing lease is judged (a TTL; see below);
     * `parkAnnounceGraceMs`: how long a parker has to announce its parking (`sweepOwedParks`).
     */
    options: { confirmDeathMs?: number; startGraceMs?: number; parkAnnounceGraceMs?: number } = {},
  ) {
    this.confirmDeathMs = options.confirmDeathMs ?? 150;
    this.parkAnnounceGraceMs = options.parkAnnounceGraceMs ?? PARK_ANNOUNCE_GRACE_MS;
    this.deaths = new DeathWatch(this.confirmDeathMs);
    // Monotonic: with Date.now, a wall clock stepped an hour back right after Redis trouble
    // left every missing lease unjudged for that hour (test/sweeper-clock.test.ts).
    this.now = deps.now ?? (() => performance.now());
    // Redis emptied just before it started (no marker to compare: redis-data-loss.ts) looks
    // like no loss: its start counts as Redis trouble, no missing lease judged for a TTL.
    this.startTroubleAt = this.now() - deps.lease.ttlMs + (options.startGraceMs ?? deps.lease.ttlMs);
    this.failures = new SessionFailures(deps);
    this.dataLoss = new RedisDataLoss(deps, () => this.redisTrouble());
    this.locks = new SweepLocks({
      prefix: deps.prefix,
      redis: deps.redis,
      name: deps.name,
      log: deps.log,
      now: this.now,
      confirmDeathMs: this.confirmDeathMs,
      judgeable: () => leaseJudgeable(this.now() - this.redisTroubleAt, deps.lease.ttlMs),
      timed: (request) => this.timed(request),
    });
    this.orphans = new OrphanedRuns(deps, (sessionId, fn) => this.withSessionLock(sessionId, fn));
    this.deadClaims = new DeadClaims(
      deps,
      new DeathWatch(this.confirmDeathMs),
      this.now,
      this.failures,
      (sessionId, fn) => this.withSessionLock(sessionId, fn),
    );
  }

  private get stopping(): boolean {
    return this.deps.signal?.aborted === true;
  }

  /** Forget liveness observations, e.g. after Redis came back (every worker reconnects). */
  resetLiveness(): void {
    this.deaths.reset();
    this.deadClaims.reset();
    this.locks.reset();
    this.redisTrouble();
  }

  /**
   * Redis failed, came back, or took longer than a renewal period to answer (frozen, failing
   * over): workers' renewals may not have reached it either, so a missing lease says nothing
   * until Redis has answered well for a whole TTL again (`leaseJudgeable`).
   */
  redisTrouble(at = this.now()): void {
    this.redisTroubleAt = Math.max(this.redisTroubleAt, at);
  }

  /** Runs one Redis request, noting trouble when it fails or answers late. */
  private async timed<T>(request: () => Promise<T>): Promise<T> {
    const askedAt = this.now();
    try {
      const answer = await request();
      if (slowAnswer(this.now() - askedAt, this.deps.lease.ttlMs)) this.redisTrouble();
      return answer;
    } catch (error) {
      this.redisTrouble();
      throw error;
    }
  }

  lockKey(sessionId: string): string {
    return this.locks.key(sessionId);
  }

  /** Runs `fn` under the session's sweep lock (sweep-locks.ts); undefined when another sweeper holds it. */
  private withSessionLock<T>(sessionId: string, fn: () => Promise<T>): Promise<T | undefined> {
    return this.locks.withLock(sessionId, fn);
  }

  /** Which workers are alive now (CLIENT LIST on every master, or heartbeats). */
  liveWorkers(): Promise<Set<string>> {
    return liveWorkers(this.deps.redis, this.deps.prefix, this.deps.log);
  }

  /**
   * Parts 1 and 4, the checks of every tick, on one reading of who is alive: CLIENT LIST
   * lists every connection of the server, which on a large fleet is the bigger part of a
   * tick's cost, so it is read once per tick, not once per check.
   */
  async sweepWorkers(): Promise<{ abandoned: number; requeued: number }> {
    const live = await this.timed(() => this.liveWorkers());
    return { abandoned: await this.sweepAbandoned(live), requeued: await this.sweepDeadClaims(live) };
  }

  /** Part 1: runs whose worker is dead or whose lease expired (`live`: who is alive, read now when not given). */
  async sweepAbandoned(liveNow?: Set<string>): Promise<number> {
    const running = await this.deps.sweeps.runningRuns();
    this.deps.progress?.observe(running);
    // Looked for with no run too: a loss on an idle fleet is counted when it happens.
    if (running.length === 0) {
      await this.timed(() => this.dataLoss.check());
      return 0;
    }
    const live = liveNow ?? (await this.timed(() => this.liveWorkers()));
    // All holders at once (MGET, a round trip per 500 runs), then the abandoned runs a few
    // at a time: a worker that dies with 30 sessions must not have them resumed one by one.
    const holders = await this.timed(() => this.deps.lease.holders(running.map((run) => run.session_id)));
    // After the leases: a loss before or since their read is seen (redis-data-loss.ts).
    await this.timed(() => this.dataLoss.check());
    const now = this.now();
    // Leases read while Redis was away or just back may be missing only because their
    // workers' renewals have not landed yet (they take them back: lease-keeper.ts).
    const troubleAt = Math.max(this.redisTroubleAt, this.startTroubleAt);
    const judgeable = leaseJudgeable(now - troubleAt, this.deps.lease.ttlMs);
    // Heartbeats are data as leases are, beaten as often: missing ones are judged alike.
    const owners = running.map((r) => r.worker_id ?? "");
    const heartbeats = livenessMode(this.deps.redis) === "heartbeat";
    const dead = !judgeable && heartbeats ? new Set<string>() : this.deaths.observe(live, owners, now);
    let count = 0;
    await forEachLimit(
      running.entries(),
      ABANDONED_AT_ONCE,
      async ([i, run]) => {
        const holder = holders[i]!;
        const holderAlive = holder !== null && live.has(ownerOf(holder)) && !dead.has(ownerOf(holder));
        if (holderAlive) return; // someone live holds the session: slow, not stuck
        const workerId = run.worker_id ?? "";
        const workerDead = dead.has(workerId);
        // A live worker renews its lease every ttl/3; no lease at all means it froze or lost Redis.
        // The run's age is Postgres's (its start is): the sweeper host's clock may be off.
        const leaseExpired = judgeable && holder === null && run.age_ms > this.deps.lease.ttlMs;
        // A worker missing from CLIENT LIST but not yet confirmed dead is looked at next tick.
        const frozen = leaseExpired && live.has(workerId);
        if (!workerDead && !frozen) return;
        // With heartbeats (a Redis that refuses CLIENT LIST) a killed worker and a frozen one
        // look alike — both stop beating, and the lease may lapse before the beat does — so
        // the run ends `crashed` either way; only a listed connection tells a freeze apart.
        const cause: Cause =
          workerDead || livenessMode(this.deps.redis) === "heartbeat" ? "crashed" : "stalled";
        const done = await this.failures.guarded(run.session_id, () =>
          this.withSessionLock(run.session_id, async () => {
            const stillHeldBy = await this.deps.lease.holder(run.session_id);
            if (stillHeldBy !== holder) return false; // it changed hands meanwhile: look again next tick
            if (holder !== null) await this.deps.lease.release(run.session_id, holder);
            const lastRenewal = await this.deps.lease.lastRenewal(run.session_id);
            // Held while the run ends and the epoch moves: a worker taking its lease back now
            // finds it held and stops; one that took it back first keeps it (we skip).
            const seized = await this.deps.lease.seize(run.session_id, SWEEPER_OWNER);
            if (seized === null) return false;
            // `cause`, or `cancelled` for a run a cancel found running (contracts §9).
            let ended: { outcome: AbandonedRunEnd; lastSeq: number } | null;
            try {
              ended = await this.deps.sweeps.endAbandonedRunAt(run.id, cause);
              if (ended === null) return false;
              // Counted once its end is stored, before the release: a release that fails (Redis
              // gone) leaves the resume to part 2, which finds the run ended and counts nothing.
              const kind = run.kind === "resume" ? "resume" : "run";
              this.deps.metrics.runs.inc({ kind, outcome: ended.outcome });
            } finally {
              await this.deps.lease.release(run.session_id, seized);
            }
            const { outcome, lastSeq } = ended; // before the resume's RUN_STARTED; a stream past lastSeq skips it
            const written = await (
              this.deps.runEnded?.(run.session_id, run.id, outcome, lastSeq) ?? Promise.resolve()
            ).then(
              () => true,
              (error: unknown) => {
                this.deps.log.warn(
                  { err: error, sessionId: run.session_id },
                  "writing the run's end event failed; the resume is left to the next look",
                );
                return false;
              },
            );
            this.deps.log.info(
              { sessionId: run.session_id, runId: run.id, workerId: run.worker_id, cause, outcome },
              "run abandoned",
            );
            // Once a resume has started, this run is no longer the session's latest and its lost
            // end is never written (EventWriter.missingRunEnd). Not resumed now, the session is
            // part 2's, as after a sweeper that died here: it writes the lost end, then resumes.
            if (written) await resumeOrPark(this.deps, run.session_id, cause, lastRenewal);
            return true;
          }),
        );
        if (done) count++;
      },
      this.deps.signal,
    );
    return count;
  }

  /** Part 2: interrupted sessions nobody is running. Returns resumed and parked counts. */
  async sweepInterrupted(limit = 200): Promise<{ resumed: number; parked: number }> {
    const result = { resumed: 0, parked: 0 };
    for (const session of await this.deps.sweeps.sessionsNeedingAttention(limit)) {
      if (this.stopping) break;
      const outcome = await this.failures.guarded(session.id, () =>
        this.withSessionLock(session.id, async () => {
          // Events never hold up a resume: a failed write is logged and the resume goes on.
          await this.deps
            .runEndMissing?.(session.id)
            .catch((error: unknown) =>
              this.deps.log.warn({ err: error, sessionId: session.id }, "writing a lost run end failed"),
            );
          return resumeOrPark(this.deps, session.id, "interrupted", null);
        }),
      );
      if (outcome === "resumed") result.resumed++;
      if (outcome === "parked") result.parked++;
    }
    return result;
  }

  /** Part 3: queued runs whose job Redis no longer has, or whose job failed for good (orphaned-runs.ts). */
  sweepOrphanedRuns(olderThanMs = 5_000, limit = 500): Promise<number> {
    return this.orphans.sweep(olderThanMs, limit);
  }

  /**
   * Part 4: jobs a worker claimed but died before starting, enqueued again (dead-claims.ts);
   * `live`: who is alive, read now when not given.
   */
  async sweepDeadClaims(live?: Set<string>): Promise<number> {
    return this.deadClaims.sweep(live ?? (await this.liveWorkers()));
  }

  /** Part 5: parkings their parker never announced, announced now, once (park-announcements.ts). */
  sweepOwedParks(): Promise<number> {
    return this.deps.resumes.payOwedParks(this.parkAnnounceGraceMs);
  }

  async tick(): Promise<SweepResult> {
    const abandoned = await this.sweepAbandoned();
    const { resumed, parked } = await this.sweepInterrupted();
    const requeued = (await this.sweepOrphanedRuns()) + (await this.sweepDeadClaims());
    await this.sweepOwedParks();
    return { abandoned, resumed, parked, requeued };
  }
}
