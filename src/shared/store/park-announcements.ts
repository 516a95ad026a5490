/**
 * What a parking of AutomaticResumes (`schedule`, `countRetry`) owes once it has committed: the
 * RUN_COMPLETED of the runs it ended, the session's SESSION_PARKED (contracts §7) and
 * fleet_sessions_parked_total (§6). The parking stores the debt in the session's row
 * (`park_announcement`) in its own transaction; whoever pays it clears it. Its parker pays at
 * once; when it cannot — its answer was lost after the commit (a connection reset: the caller
 * saw an error), its process died, Redis was away — a later sweep finds the debt
 * (`payOwed`) and pays it. Paid once, whoever pays how often: the stream takes one SESSION_PARKED
 * per parking (`parkId`, APPEND_SCRIPT) and one RUN_COMPLETED per run (`done`), and the metrics
 * are counted by the one whose statement cleared the debt.
 */
import type { Database } from "../db/client.js";
import type { EventWriter } from "../event-writer.js";
import type { SessionEventInput } from "../events.js";
import type { FleetMetrics } from "../metrics.js";
import { json } from "./rows.js";

/** How long a parker has to announce its parking before a sweep does it for it (`payOwed`). */
export const PARK_ANNOUNCE_GRACE_MS = 10_000;

/** A parking's announcement, as `sessions.park_announcement` keeps it while it is owed. */
export type ParkAnnouncement = {
  /** This parking's id: the stream takes its SESSION_PARKED once. */
  id: string;
  reason: string;
  /** Queued resumes the parking ended, never started (their outcome: `runOutcome`). */
  runs: string[];
};

/** The outcome of a queued resume ended with its session's parking (`countRetry`). */
export const NEVER_STARTED_RESUME_END = "crashed";

/** A new parking's announcement (pure but for its id). */
export function newAnnouncement(reason: string, runs: string[] = []): ParkAnnouncement {
  return { id: crypto.randomUUID(), reason, runs };
}

/**
 * The events that announce `owed` (pure): the ended runs' RUN_COMPLETED, then SESSION_PARKED.
 * None for a session someone re-opened since (a new message, a resume): its stream goes on with
 * that run, and these after its RUN_STARTED would be false (as a run's lost end is never written
 * once a later run started: EventWriter.missingRunEnd). Its metrics are counted all the same.
 */
export function announcementEvents(owed: ParkAnnouncement, parked: boolean): SessionEventInput[] {
  if (!parked) return [];
  return [
    ...owed.runs.map((runId) => ({
      type: "RUN_COMPLETED" as const,
      runId,
      outcome: NEVER_STARTED_RESUME_END,
    })),
    {
      type: "SESSION_PARKED" as const,
      reason: owed.reason,
      parkId: owed.id,
      // The last run it ended (none: it ended no run).
      ...(owed.runs.length > 0 ? { runId: owed.runs.at(-1)! } : {}),
    },
  ];
}

export class ParkAnnouncements {
  /** Where the events go (after the stored messages the stream lacks); null: nowhere. */
  events: Pick<EventWriter, "writeAfterSync"> | null = null;

  constructor(
    private readonly database: Database,
    private readonly metrics: Pick<FleetMetrics, "sessionsParked" | "runs">,
  ) {}

  /**
   * Pays `owed` for the session: its events, then the debt cleared and counted. False: the
   * events could not be written (left owed, for a later sweep) or someone else cleared it.
   */
  async pay(sessionId: string, owed: ParkAnnouncement, parked = true): Promise<boolean> {
    try {
      await this.events?.writeAfterSync(this.database, sessionId, announcementEvents(owed, parked));
    } catch {
      return false; // Redis away: a Redis failure is not the caller's; the debt stays owed
    }
    const cleared = await this.database.sql`
      update sessions set park_announcement = null
       where id = ${sessionId} and park_announcement ->> 'id' = ${owed.id} returning 1`;
    if (cleared.length === 0) return false;
    this.metrics.sessionsParked.inc({ reason: owed.reason });
    for (const _ of owed.runs) this.metrics.runs.inc({ kind: "resume", outcome: NEVER_STARTED_RESUME_END });
    return true;
  }

  /**
   * Pays the debts of parkings that committed more than `graceMs` ago (their parker had that
   * long to pay), at most `limit`, oldest first; returns how many it paid.
   */
  async payOwed(graceMs: number, limit = 100): Promise<number> {
    const rows = await this.database.sql<{ id: string; owed: string | ParkAnnouncement; parked: boolean }[]>`
      select id, park_announcement as owed, status = 'parked' as parked from sessions
       where park_announcement is not null
         and updated_at < now() - make_interval(secs => ${graceMs / 1000})
       order by updated_at limit ${limit}`;
    let paid = 0;
    for (const row of rows)
      if (await this.pay(row.id, json<ParkAnnouncement>(row.owed), row.parked).catch(() => false)) paid++;
    return paid;
  }
}
