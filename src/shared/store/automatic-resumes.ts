/**
 * The one way an automatic resume comes to be (contracts.md §12). The sweeper, a worker that
 * finds a run its predecessor left (a crash, or a job the queue retried) and a worker that
 * hands a session on at shutdown all call `schedule`; the sweeper's re-adding of a job that
 * never started calls `countRetry`. Both decide under a row lock on the session, against
 * the same count (`sessions.resume_attempts`), with the pure policy in resume-policy.ts: a
 * session that moved to another point since the last counted attempt starts the count
 * again; one stuck at the same point is counted with backoff, and past the limit it is
 * parked with its last real reason. A worker's hand-over at shutdown (its run's error
 * WORKER_STOPPED_ERROR) is not counted, up to the policy's `maxHandovers` a request. Nothing else in the code base creates a resume
 * without someone asking for it.
 */
import type postgres from "postgres";
import {
  type ModelConfig,
  parseAgentConfig,
  type ResumeSettings,
  resumeSettingsOfNewer,
} from "../agent-config.js";
import { crashClockStart } from "../crash-clock.js";
import type { Database } from "../db/client.js";
import type { RunRow } from "../db/schema.js";
import type { EventWriter } from "../event-writer.js";
import type { FleetMetrics } from "../metrics.js";
import { NewerAgentError } from "../newer-agent.js";
import { QUEUES } from "../queues.js";
import { resumePoint } from "../resume-point.js";
import { decideResume, type ParkReason, type ResumePolicy, resumeBackoffMs } from "../resume-policy.js";
import {
  NEVER_STARTED_RESUME_END,
  newAnnouncement,
  type ParkAnnouncement,
  ParkAnnouncements,
} from "./park-announcements.js";
import { readStand } from "./resume-stand.js";
import { json, type RawRun, runFromRaw } from "./rows.js";

export type Scheduled =
  /** `delayMs`: how long its job waits (the rest of the previous attempt's backoff). */
  | { action: "resume"; run: RunRow; delayMs: number; attempt: number }
  | { action: "park"; reason: ParkReason; detail?: string }
  | { action: "none" };

export type Retried =
  | { action: "retry"; delayMs: number }
  /** `ended`: the session's queued resume, ended with the parking (`countRetry`). */
  | {
      action: "park";
      reason: ParkReason;
      detail: string;
      ended: { id: string; kind: "resume" }[];
    };

export { NEVER_STARTED_RESUME_END } from "./park-announcements.js";

export class AutomaticResumes {
  /** What a parking owes once committed, paid by its parker or a later sweep (park-announcements.ts). */
  readonly announcements: ParkAnnouncements;

  constructor(
    private readonly database: Database,
    private readonly policy: ResumePolicy,
    metrics: Pick<FleetMetrics, "sessionsParked" | "runs">,
  ) {
    this.announcements = new ParkAnnouncements(database, metrics);
  }

  /** Where SESSION_PARKED events go (contracts §7), after the parking committed; null: nowhere. */
  get events(): Pick<EventWriter, "writeAfterSync"> | null {
    return this.announcements.events;
  }
  set events(events: Pick<EventWriter, "writeAfterSync"> | null) {
    this.announcements.events = events;
  }

  /**
   * Parks the session, its announcement owed in the same statement (park-announcements.ts);
   * null when it was not active.
   */
  private async park(
    tx: postgres.TransactionSql,
    sessionId: string,
    reason: ParkReason,
    detail?: string,
  ): Promise<ParkAnnouncement | null> {
    const text = detail ? `${reason}: ${detail}` : reason;
    const owed = newAnnouncement(reason);
    const rows = await tx`
      update sessions set status = 'parked', parked_reason = ${text}, updated_at = now(),
             park_announcement = ${JSON.stringify(owed)}::jsonb
       where id = ${sessionId} and status = 'active' returning 1`;
    return rows.length > 0 ? owed : null;
  }

  /**
   * Pays the announcements of parkings that committed more than `graceMs` ago and that no one
   * paid: their parker lost its answer, died, or found Redis away (the sweeper's, each scan).
   */
  payOwedParks(graceMs: number): Promise<number> {
    return this.announcements.payOwed(graceMs);
  }

  /** Queues an automatic resume of an interrupted session, or parks it, or does nothing. */
  async schedule(input: {
    sessionId: string;
    trigger: "sweeper" | "worker";
    /**
     * For a run that was abandoned: its last sign of life (for fleet_crash_to_resume_seconds;
     * stored moved later by the resume's backoff, `crashClockStart`).
     */
    lastSignAt?: Date;
    /** The last run's primary model was refused for good: fall back at once (resume-policy.ts). */
    primaryRejected?: boolean;
  }): Promise<Scheduled> {
    const { sessionId } = input;
    /** The announcement a parking in the transaction owes, paid once it committed. */
    const parking: { owed?: ParkAnnouncement | null } = {};
    const result = await this.database.sql.begin(async (tx): Promise<Scheduled> => {
      const stand = await readStand(tx, sessionId);
      if (stand?.session.status !== "active") return { action: "none" };
      const { session: s, history, mark } = stand;
      // `(…) is true`: by session even before `runs` is analyzed after a batch (grouped-claims.ts).
      const busy =
        await tx`select 1 from runs where session_id = ${sessionId} and (status <> 'ended') is true limit 1`;
      if (busy.length > 0) return { action: "none" }; // a run or resume is on its way: it acts
      let agent: ResumeSettings;
      try {
        agent = parseAgentConfig(json(s.agent));
      } catch (error) {
        // An agent a newer release wrote (a rolling deploy, this process the older): decided
        // on the settings this release knows; the resume's worker reads the rest, or hands
        // the run back for a newer worker (newer-agent-wait.ts). Parked at once, before.
        const known = error instanceof NewerAgentError ? resumeSettingsOfNewer(json(s.agent)) : null;
        if (known) agent = known;
        else {
          parking.owed = await this.park(tx, sessionId, "invalid_agent", (error as Error).message);
          return parking.owed
            ? { action: "park", reason: "invalid_agent", detail: (error as Error).message }
            : { action: "none" };
        }
      }
      const decision = decideResume({
        point: resumePoint(history),
        agent,
        attempts: s.resume_attempts,
        progressed: stand.progressed,
        continuations: s.continuations,
        automaticResumes: s.automatic_resumes,
        handover: s.handover,
        handovers: s.handovers,
        nextResumeAt: s.next_resume_at ? new Date(s.next_resume_at) : null,
        lastOutcome: s.last_outcome,
        // Whoever asks: the worker that ended the run says so, and the sweeper, whose scan may
        // see the ended run first, reads it from the run itself.
        primaryRejected: input.primaryRejected === true || s.primary_rejected,
        ...(s.asked_model ? { askedModel: json<ModelConfig>(s.asked_model) } : {}),
        // Every time here is on Postgres's clock, as the sweeper's scan reads them: a worker or
        // sweeper whose clock is off would otherwise delay a resume, or skip its backoff, by as much.
        now: new Date(s.db_now),
        policy: this.policy,
      });
      switch (decision.action) {
        case "none":
          return decision;
        case "park": {
          parking.owed = await this.park(tx, sessionId, decision.reason, decision.detail);
          return parking.owed ? decision : { action: "none" };
        }
        case "resume": {
          const id = crypto.randomUUID();
          const waitMs = Math.max(0, decision.runAt.getTime() - new Date(s.db_now).getTime());
          const signAt = crashClockStart(input.lastSignAt, waitMs);
          // A resume someone asked for meanwhile (the API's insert does not take this lock)
          // wins: the unique index allows one, and then there is nothing to count.
          const [inserted] = await tx<{ r: string | RawRun }[]>`
            insert into runs (id, session_id, tenant, batch_id, kind, trigger, resume_kind, model, job_id, last_sign_at)
            values (${id}, ${sessionId}, (select tenant from sessions where id = ${sessionId}),
                    (select batch_id from sessions where id = ${sessionId}), 'resume', ${input.trigger}, ${decision.kind},
                    ${decision.model ? JSON.stringify(decision.model) : null}::jsonb,
                    ${QUEUES.runs.jobId({ sessionId, runId: id })}, ${signAt?.toISOString() ?? null})
            on conflict (session_id) where kind = 'resume' and status <> 'ended' do nothing
            returning row_to_json(runs) as r`;
          if (!inserted) return { action: "none" };
          await tx`
            update sessions set resume_attempts = ${decision.attempt}, attempt_point = ${mark},
                   attempt_seq = ${s.last_seq},
                   next_resume_at = ${decision.nextResumeAt.toISOString()}, updated_at = now()
             where id = ${sessionId}`;
          return {
            action: "resume",
            run: runFromRaw(json<RawRun>(inserted!.r)),
            delayMs: waitMs,
            attempt: decision.attempt,
          };
        }
      }
    });
    // Its events and metric, after the commit; owed still when they cannot be written now.
    if (result.action === "park" && parking.owed) await this.payNow(sessionId, parking.owed);
    return result;
  }

  /** Pays a parking's announcement right after its commit; a failure leaves it owed, not the caller's. */
  private async payNow(sessionId: string, owed: ParkAnnouncement): Promise<void> {
    await this.announcements.pay(sessionId, owed).catch(() => {});
  }

  /**
   * What remains of the backoff of each of these queued automatic resumes (ms, on Postgres's
   * clock; runs not listed have none): the time before which their job was to wait. A resume
   * (or a counted retry) waits until its attempt's start, and `next_resume_at` is that start
   * plus the attempt's backoff (`schedule`, `countRetry`), so the start is `next_resume_at`
   * less `resumeBackoffMs(resume_attempts)`. Only automatic resumes (`sweeper`, `worker`):
   * a run someone asked for never waits for a backoff.
   */
  async backoffLeftMs(runIds: readonly string[]): Promise<Map<string, number>> {
    if (runIds.length === 0) return new Map();
    const { backoffBaseMs, backoffMaxMs } = this.policy;
    const rows = await this.database.sql<{ id: string; left_ms: number }[]>`
      select r.id, ceil(extract(epoch from (s.next_resume_at - now())) * 1000
               - least(${backoffBaseMs}::float8 * power(2, greatest(s.resume_attempts - 1, 0)), ${backoffMaxMs}::float8)
             )::float8 as left_ms
        from runs r join sessions s on s.id = r.session_id
       where r.id in ${this.database.sql(runIds)} and r.kind = 'resume' and r.trigger in ('sweeper', 'worker')
         and (r.status = 'queued') is true and r.started_at is null and s.next_resume_at is not null`;
    return new Map(rows.filter((row) => row.left_ms > 0).map((row) => [row.id, Math.ceil(row.left_ms)]));
  }

  /**
   * Counts the re-adding of a queued run's job that never started (its worker died holding
   * it, or the queue gave up on it) against the same limit; past it the session is parked.
   * A queued run with new input then waits for someone to act (a new message runs it first,
   * an explicit resume starts it; meanwhile it is no one's work: waiting-input.ts);
   * a queued resume, which holds nothing, is ended with the parking: left queued, it was
   * started by no one yet kept the parked session `running` (its resume point, an explicit
   * resume with a model refused 409, one of its tenant's active sessions) and ran first,
   * at the point it could not get past, when a new message came.
   */
  async countRetry(
    sessionId: string,
    runId: string,
    /**
     * The attempt being retried (the finished job, the dead claim), stored on the run with the
     * count: the same attempt asked again — its count committed but its answer was lost — is
     * the same retry, not counted twice (test/retry-counted-once.test.ts).
     */
    attemptKey: string,
  ): Promise<Retried | { action: "none" }> {
    const parking: { owed?: ParkAnnouncement | null } = {};
    const result = await this.database.sql.begin(async (tx): Promise<Retried | { action: "none" }> => {
      const stand = await readStand(tx, sessionId);
      if (stand?.session.status !== "active") return { action: "none" };
      // Under the session's lock, which a worker's claim also takes before it starts a run: a
      // run that started since the caller looked needs no retry, and none is counted.
      const [queued] = await tx<{ retry_key: string | null }[]>`
        select retry_key from runs where id = ${runId} and (status = 'queued') is true`;
      if (!queued) return { action: "none" };
      const { session: s, mark } = stand;
      if (queued.retry_key === attemptKey) {
        // Counted already: its job waits until the attempt's start, as it would have.
        const startsAt = s.next_resume_at
          ? new Date(s.next_resume_at).getTime() - resumeBackoffMs(this.policy, s.resume_attempts)
          : 0;
        return { action: "retry", delayMs: Math.max(0, startsAt - new Date(s.db_now).getTime()) };
      }
      const attempts = stand.progressed ? 0 : s.resume_attempts;
      if (attempts >= this.policy.maxAttempts) {
        const detail = `${attempts} automatic retries made no progress; the last run ended ${s.last_outcome ?? "before it started"}`;
        const parked = await this.park(tx, sessionId, "attempts_exhausted", detail);
        if (!parked) return { action: "none" };
        const ended = await tx<{ id: string; kind: "resume" }[]>`
          update runs set status = 'ended', ended_reason = ${NEVER_STARTED_RESUME_END}, ended_at = now(),
                          error = ${`never started: attempts_exhausted: ${detail}`}
           where session_id = ${sessionId} and kind = 'resume' and (status = 'queued') is true
          returning id, kind`;
        // The runs it ended are announced with it (their RUN_COMPLETED, fleet_runs_total).
        parking.owed = { ...parked, runs: ended.map((run) => run.id) };
        await tx`update sessions set park_announcement = ${JSON.stringify(parking.owed)}::jsonb where id = ${sessionId}`;
        return { action: "park", reason: "attempts_exhausted", detail, ended };
      }
      const now = new Date(s.db_now).getTime();
      const wait = attempts > 0 && s.next_resume_at ? new Date(s.next_resume_at).getTime() : 0;
      const runAt = new Date(Math.max(now, wait));
      const attempt = attempts + 1;
      await tx`
        update sessions set resume_attempts = ${attempt}, attempt_point = ${mark},
               attempt_seq = ${s.last_seq},
               next_resume_at = ${new Date(runAt.getTime() + resumeBackoffMs(this.policy, attempt)).toISOString()},
               updated_at = now()
         where id = ${sessionId}`;
      await tx`update runs set retry_key = ${attemptKey} where id = ${runId}`;
      return { action: "retry", delayMs: Math.max(0, runAt.getTime() - now) };
    });
    if (result.action === "park" && parking.owed) await this.payNow(sessionId, parking.owed);
    return result;
  }
}
