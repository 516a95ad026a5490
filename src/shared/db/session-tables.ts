/**
 * The tables of sessions and what they hold: `sessions`, their `messages`, the usage marks
 * summed from them and the outbox of deleted sessions' hooks (part of the Drizzle schema,
 * schema.ts).
 */
import { sql } from "drizzle-orm";
import {
  bigint,
  boolean,
  index,
  integer,
  jsonb,
  numeric,
  pgTable,
  primaryKey,
  text,
  timestamp,
  uniqueIndex,
} from "drizzle-orm/pg-core";
import type { AgentConfig } from "../agent-config.js";
import type { ProviderState, ToolCall, Usage } from "../messages.js";

/** Tail states from which the sweeper may have to resume a session. */
export const RESUMABLE_TAIL_STATES = [
  "awaiting_model",
  "tools_pending",
  "interrupted",
  "max_output",
  "paused",
] as const;

/**
 * Stored with fillfactor 60 (migration 0019; Drizzle has no table storage parameters): each
 * page keeps room for the next version of its rows, so an append that changes no indexed
 * column is a HOT update even when the row's batch filled its page.
 */
export const sessions = pgTable(
  "sessions",
  {
    id: text("id").primaryKey(),
    /** The tenant (contracts §10) whose API key created it; only that tenant's keys see it. */
    tenant: text("tenant").notNull().default("default"),
    /** What a resume needs to rebuild the agent long after the producer is gone. */
    agent: jsonb("agent").$type<AgentConfig>().notNull(),
    metadata: jsonb("metadata").$type<Record<string, unknown>>().notNull().default({}),
    /**
     * `active`, `parked` (nothing will run it until someone acts) or `cancelled` (stopped on
     * request, never resumed automatically; a new message makes it active again).
     */
    status: text("status").notNull().default("active"),
    /** Derived from the history in the same statement as each append (see tail-state.ts). */
    tailState: text("tail_state").notNull().default("empty"),
    /**
     * `completed`, `empty` or `open` (any other tail state), computed by Postgres: the partial
     * indexes below test this instead of `tail_state`, which changes on nearly every append
     * while this changes only when a run starts or ends. With no indexed column changed, an
     * append updates the session row in place (a HOT update: no index entry written).
     */
    tailPhase: text("tail_phase")
      .notNull()
      .generatedAlwaysAs(sql`case when tail_state in ('completed', 'empty') then tail_state else 'open' end`),
    lastSeq: integer("last_seq").notNull().default(0),
    /** Fencing epoch: bumped by each lease holder; every append requires it unchanged. */
    leaseEpoch: bigint("lease_epoch", { mode: "number" }).notNull().default(0),
    leaseOwner: text("lease_owner"),
    /**
     * Whether a run of it has ever started. Only then does the sweeper resume it on its own:
     * an imported history runs nothing until someone sends a message or asks for a resume.
     */
    runStarted: boolean("run_started").notNull().default(false),
    /** Automatic resumes since the session last made progress (contracts §12). */
    resumeAttempts: integer("resume_attempts").notNull().default(0),
    /**
     * Where the session stood (resume-policy.ts `progressMark`) when the last automatic
     * resume was counted: reaching another point is progress, the same point again is not.
     */
    attemptPoint: text("attempt_point"),
    /** `last_seq` then: a tool that ran to its end after it is the other half of progress. */
    attemptSeq: integer("attempt_seq").notNull().default(0),
    /**
     * Model calls made for it across all runs (counted as they are made only for agents with a
     * `budget.maxModelCalls`), and one per imported step with what its import said was spent
     * beyond them (imported-spent.ts): an exported session imported again keeps its count.
     */
    modelCalls: integer("model_calls").notNull().default(0),
    /**
     * The key of the last model call counted in `model_calls` (FencedWrites.reserveModelCall),
     * or of the last failed attempt's billed tokens counted in `tokens_used`
     * (FencedWrites.countBilledTokens): the same write sent again after its answer was lost (a
     * Postgres outage ridden out) finds its key and is not counted twice.
     */
    modelCallKey: text("model_call_key"),
    /** Tokens (input + output) its model steps reported, across all runs. */
    tokensUsed: bigint("tokens_used", { mode: "number" }).notNull().default(0),
    nextResumeAt: timestamp("next_resume_at", { withTimezone: true }),
    parkedReason: text("parked_reason"),
    /** The last sign of life of whoever acts on it: its last append or lease renewal. */
    lastActiveAt: timestamp("last_active_at", { withTimezone: true }).notNull().defaultNow(),
    createdAt: timestamp("created_at", { withTimezone: true }).notNull().defaultNow(),
    updatedAt: timestamp("updated_at", { withTimezone: true }).notNull().defaultNow(),
    /** The batch it was created in (contracts §9), if any, and the caller's id for it there. */
    batchId: text("batch_id"),
    customId: text("custom_id"),
    /** When it was last cancelled (status `cancelled`: never resumed automatically). */
    cancelledAt: timestamp("cancelled_at", { withTimezone: true }),
    /**
     * The runs its last cancel found running (batch-cancel.ts): each append of one of them
     * answers `cancelled` (cancel-reads.ts), even once a new message re-opened the session,
     * so the run stops before its next tool though the cancel's signal never reached its
     * worker. Null: never cancelled with a run running.
     */
    cancelledRuns: text("cancelled_runs").array(),
    /**
     * Whether its event stream (contracts §7) is written. Created with `sessionEvents: false`
     * (a session, or every session of a batch), or set so by `PATCH /v1/sessions/:id`
     * (session-events-setting.ts): no worker, sweeper or API writes it, and
     * `GET /v1/sessions/:id/events` answers 409 `session_events_off`.
     */
    sessionEvents: boolean("session_events").notNull().default(true),
    /**
     * The bytes of its stored messages up to `history_bytes_seq` (store/history-bytes.ts: the
     * measure an import's `maxHistoryBytes` bounds), counted by each append in its statement,
     * so that an imported page adds to it rather than summing the whole history again.
     */
    historyBytes: bigint("history_bytes", { mode: "number" }).notNull().default(0),
    /**
     * The `last_seq` up to which `history_bytes` counts: a writer of a release before it (or a
     * row from before migration 0024) left it behind, and its reader counts the rest.
     */
    historyBytesSeq: integer("history_bytes_seq").notNull().default(0),
    /**
     * The announcement a parking still owes (park-announcements.ts): `{id, reason, runs}`, set in
     * the parking's own transaction and cleared by whoever wrote its SESSION_PARKED (and the
     * RUN_COMPLETED of the runs it ended) and counted it. Null: nothing owed.
     */
    parkAnnouncement: jsonb("park_announcement").$type<{ id: string; reason: string; runs: string[] }>(),
  },
  (t) => [
    // A batch's sessions in a stable order (results are paged by id) and its counts.
    index("sessions_batch_idx").on(t.batchId, t.id).where(sql`${t.batchId} is not null`),
    // A batch's sessions in the session list's order (the console's batch filter, paged).
    index("sessions_batch_updated_idx").on(t.batchId, t.updatedAt, t.id).where(sql`${t.batchId} is not null`),
    uniqueIndex("sessions_batch_custom_id_idx")
      .on(t.batchId, t.customId)
      .where(sql`${t.batchId} is not null and ${t.customId} is not null`),
    // A batch's sessions mid-run or interrupted (running until they end or are parked):
    // with `runs_batch_state_idx`, what says whether a batch has ended (batch-busy.ts).
    // Sessions never started are not in it: those with a run to come are found by that run.
    index("sessions_batch_midrun_idx")
      .on(t.batchId)
      .where(
        sql`${t.batchId} is not null and ${t.status} = 'active' and ${t.runStarted} and ${t.tailPhase} <> 'completed'`,
      ),
    // The sweeper's scan grows with the number of sessions in flight or stuck, not with all
    // sessions: completed, empty and parked ones are not in this index.
    // Ordered as the scan reads it (never-resumed sessions first), so it stops at its limit.
    index("sessions_attention_idx")
      .on(t.nextResumeAt.asc().nullsFirst())
      .where(sql`${t.status} = 'active' and ${t.runStarted} and ${t.tailPhase} = 'open'`),
    // A tenant's sessions in the sweeper's attention set (as sessions_attention_idx): mid-run, or
    // between an interrupted run's end and its automatic resume. The active-session cap
    // (FLEET_TENANT_MAX_ACTIVE_SESSIONS) counts them with the tenant's unended runs
    // (active-sessions.ts): a session with no run for that moment is still the tenant's.
    index("sessions_tenant_attention_idx")
      .on(t.tenant)
      .where(sql`${t.status} = 'active' and ${t.runStarted} and ${t.tailPhase} = 'open'`),
    // A tenant's session list, newest activity first, paged by (updated_at, id) (the console).
    index("sessions_tenant_updated_idx").on(t.tenant, t.updatedAt, t.id),
    // The parked queue: a few sessions among millions, listed without scanning the rest.
    index("sessions_tenant_parked_idx").on(t.tenant, t.updatedAt, t.id).where(sql`${t.status} = 'parked'`),
    // Parkings whose announcement is owed: a handful at any time, found without a scan.
    index("sessions_park_announcement_idx").on(t.updatedAt).where(sql`${t.parkAnnouncement} is not null`),
    // Retention (FLEET_RETENTION_DAYS): sessions outside batches (those go with their batch)
    // that nothing will act on by itself (not in the sweeper's attention set), oldest activity
    // first, so the sweeper's chunked deletes read only what they delete. `updated_at` changes
    // only when a run starts or ends, like the predicate's columns: appends stay HOT updates.
    index("sessions_idle_idx")
      .on(t.updatedAt, t.id)
      .where(
        sql`${t.batchId} is null and not (${t.status} = 'active' and ${t.runStarted} and ${t.tailPhase} = 'open')`,
      ),
  ],
);

export const messages = pgTable(
  "messages",
  {
    sessionId: text("session_id")
      .notNull()
      .references(() => sessions.id, { onDelete: "cascade" }),
    seq: integer("seq").notNull(),
    role: text("role").notNull(),
    content: text("content").notNull(),
    toolCalls: jsonb("tool_calls").$type<ToolCall[]>(),
    toolCallId: text("tool_call_id"),
    /** For tool results: the seq of the assistant step whose call this answers. */
    callSeq: integer("call_seq"),
    name: text("name"),
    success: boolean("success"),
    stopReason: text("stop_reason"),
    usage: jsonb("usage").$type<Usage>(),
    /** Assistant steps: the provider's blocks to replay with the history (contracts §13), verbatim. */
    providerState: jsonb("provider_state").$type<ProviderState>(),
    runId: text("run_id"),
    createdAt: timestamp("created_at", { withTimezone: true }).notNull().defaultNow(),
  },
  (t) => [
    primaryKey({ columns: [t.sessionId, t.seq] }),
    // A tool call is answered at most once, whatever any process does.
    uniqueIndex("messages_one_result_per_call")
      .on(t.sessionId, t.callSeq, t.toolCallId)
      .where(sql`${t.role} = 'tool'`),
  ],
);

/**
 * A point up to which a session's usage has been summed (store/session-usage.ts): the sums of
 * its assistant steps with `seq` ≤ `seq`. Messages are never changed once stored, so a mark
 * stays true; a read of the session's usage adds only the steps after it, and moves it on when
 * it had many to add. Kept by reads, not by the appends, so the hot path writes nothing more.
 */
export const sessionUsageMarks = pgTable("session_usage_marks", {
  sessionId: text("session_id")
    .primaryKey()
    .references(() => sessions.id, { onDelete: "cascade" }),
  seq: integer("seq").notNull(),
  inputTokens: bigint("input_tokens", { mode: "number" }).notNull(),
  outputTokens: bigint("output_tokens", { mode: "number" }).notNull(),
  cacheReadTokens: bigint("cache_read_tokens", { mode: "number" }).notNull(),
  cacheWriteTokens: bigint("cache_write_tokens", { mode: "number" }).notNull(),
  reasoningTokens: bigint("reasoning_tokens", { mode: "number" }).notNull(),
  costUsd: numeric("cost_usd").notNull(),
  unknownSteps: bigint("unknown_steps", { mode: "number" }).notNull(),
});

/**
 * Deleted sessions whose extensions' `onSessionDeleted` hooks are still owed (an outbox,
 * contracts §8 additive): a row is written in the statement that deletes the session, so no
 * delete is missed, and removed by the worker that called the hooks. `claimed_until`: the
 * worker that took it has until then; past it (the worker died) another takes it again.
 */
export const sessionDeletions = pgTable(
  "session_deletions",
  {
    sessionId: text("session_id").primaryKey(),
    tenant: text("tenant").notNull(),
    deletedAt: timestamp("deleted_at", { withTimezone: true }).notNull().defaultNow(),
    claimedUntil: timestamp("claimed_until", { withTimezone: true }).notNull().defaultNow(),
    attempts: integer("attempts").notNull().default(0),
  },
  (t) => [index("session_deletions_claim_idx").on(t.claimedUntil)],
);

/**
 * Runs a delete found running (store/data-deletion.ts), written in the statement that deleted
 * their session: the delete's signal to their workers (the cancel channel) is a Redis publish,
 * lost while Redis is away or a worker's subscriber reconnects, and the runs' rows are gone
 * with the session. The sweeper sends it again while the session's lease is still held, and
 * forgets the row once it is not (sweeper/deleted-runs.ts).
 */
export const deletedRuns = pgTable("deleted_runs", {
  runId: text("run_id").primaryKey(),
  sessionId: text("session_id").notNull(),
  deletedAt: timestamp("deleted_at", { withTimezone: true }).notNull().defaultNow(),
});
