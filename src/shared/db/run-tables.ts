/**
 * The table of runs and the sequence that orders them in their session's queue (part of the
 * Drizzle schema, schema.ts).
 */
import { sql } from "drizzle-orm";
import { bigint, index, jsonb, pgSequence, pgTable, text, timestamp, uniqueIndex } from "drizzle-orm/pg-core";
import type { ModelConfig } from "../agent-config.js";
import type { RunJson, RunStatus } from "../api-types.js";
import type { Usage } from "../messages.js";
import { sessions } from "./session-tables.js";

/**
 * Where each run stands in its session's queue (`runs.queue_seq`): taken when the run's row is
 * inserted, which createRun (run-queueing.ts) does under the session's row lock, so a run
 * queued after another one has committed always gets a larger number. `created_at` cannot
 * tell: it is its transaction's start (`now()`), and a transaction that began first may take
 * the row's lock last. No cache (`cache: 1`, the default): with one, each connection would
 * hand out numbers from its own range, and a run queued later could get a smaller one.
 */
export const runsQueueSeq = pgSequence("runs_queue_seq");

export const runs = pgTable(
  "runs",
  {
    id: text("id").primaryKey(),
    sessionId: text("session_id")
      .notNull()
      .references(() => sessions.id, { onDelete: "cascade" }),
    /** Its session's tenant, copied when the run is inserted. */
    tenant: text("tenant").notNull().default("default"),
    /**
     * Its session's batch (contracts §9), copied when the run is inserted; null: none (and on
     * runs that had ended before migration 0017).
     */
    batchId: text("batch_id"),
    /** `run` (new input) or `resume`. */
    kind: text("kind").$type<RunJson["kind"]>().notNull(),
    /** For resumes: the kind applied (or asked for, while queued). */
    resumeKind: text("resume_kind"),
    /** Who asked: `api`, `sweeper`, `worker`, `cli`. */
    trigger: text("trigger").notNull(),
    /** `queued`, `running`, `ended`. */
    status: text("status").$type<RunStatus>().notNull().default("queued"),
    /** Why it ended: see RunOutcome. */
    endedReason: text("ended_reason"),
    error: text("error"),
    /** The user message of a run with new input: stored durably until a worker appends it. */
    input: text("input"),
    /** A resume may name another model (a fallback). */
    model: jsonb("model").$type<ModelConfig>(),
    /** Goal mode of a run with new input (contracts §8): `{ text, maxRounds }`; never on a resume. */
    goal: jsonb("goal").$type<{ text: string; maxRounds: number }>(),
    workerId: text("worker_id"),
    /**
     * For resumes of an interrupted run: that run's last sign of life (append or lease renewal),
     * moved later by the backoff an automatic resume waits on purpose (resume-policy.ts
     * crash-clock.ts `crashClockStart`); fleet_crash_to_resume_seconds counts from it.
     */
    lastSignAt: timestamp("last_sign_at", { withTimezone: true }),
    jobId: text("job_id"),
    /**
     * The attempt of a queued run's job whose re-adding was last counted against its session's
     * retries (AutomaticResumes.countRetry): the finished job or the dead claim it replaces. The
     * same attempt counted again (an answer lost after the commit) changes nothing.
     */
    retryKey: text("retry_key"),
    usage: jsonb("usage").$type<Usage>(),
    createdAt: timestamp("created_at", { withTimezone: true }).notNull().defaultNow(),
    /**
     * The order a session's runs are taken in, oldest first (`runsQueueSeq`): unique among runs
     * that have not ended. Runs that had ended before migration 0021 all hold 0, so every
     * ordering of a session's runs is `queue_seq, created_at, id`; the next run, among queued
     * ones, is the lowest `queue_seq`.
     */
    queueSeq: bigint("queue_seq", { mode: "number" }).notNull().default(sql`nextval('runs_queue_seq')`),
    startedAt: timestamp("started_at", { withTimezone: true }),
    endedAt: timestamp("ended_at", { withTimezone: true }),
  },
  (t) => [
    // A session's runs in the order they run (listed, paged, the latest one).
    index("runs_session_idx").on(t.sessionId, t.queueSeq, t.createdAt, t.id),
    index("runs_unfinished_idx").on(t.status, t.createdAt).where(sql`${t.status} <> 'ended'`),
    // A session's runs in one state: its next queued run (claims, and the next run after one
    // ends) and the runs an earlier holder left running (claims). Those look-ups name the state
    // as `(select 'queued'::text)`, a value the planner learns only when the statement runs:
    // an index condition here, but no proof that a partial index's `status <> 'ended'` holds,
    // so no partial index of `runs` can serve them. With statistics taken before a big batch
    // (which say almost no run is queued) such an index looks empty, and the planner read every
    // queued run of the fleet once per session (test/plans-under-backlog.test.ts). Migration
    // 0012 also has `runs` and `sessions` analyzed after every 10,000 changed rows.
    index("runs_session_state_idx").on(t.sessionId, t.status, t.queueSeq),
    // A tenant's active sessions (FLEET_TENANT_MAX_ACTIVE_SESSIONS), counted from the index alone.
    index("runs_tenant_active_idx").on(t.tenant, t.sessionId).where(sql`${t.status} <> 'ended'`),
    // A batch's runs by state: whether it has ended asks for one queued or running
    // (batch-busy.ts) and reads the batch's own, however many the tenant has queued elsewhere.
    // Not partial on the state, for the reason given above runs_session_state_idx.
    index("runs_batch_state_idx").on(t.batchId, t.status).where(sql`${t.batchId} is not null`),
    // At most one resume waiting or running per session: a second request joins it.
    uniqueIndex("runs_one_active_resume")
      .on(t.sessionId)
      .where(sql`${t.kind} = 'resume' and ${t.status} <> 'ended'`),
  ],
);
