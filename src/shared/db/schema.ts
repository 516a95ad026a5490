/**
 * The Drizzle schema. Migrations are generated from it by drizzle-kit into `drizzle/`
 * (`npm run db:generate`), committed, and never edited by hand.
 */
import { sql } from "drizzle-orm";
import {
  bigint,
  boolean,
  index,
  integer,
  jsonb,
  numeric,
  pgSequence,
  pgTable,
  primaryKey,
  text,
  timestamp,
  uniqueIndex,
} from "drizzle-orm/pg-core";
import type { AgentConfig, ModelConfig } from "../agent-config.js";
import type { RunJson, RunStatus } from "../api-types.js";
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
    /** Model calls made for it across all runs (counted only for agents with a `budget`). */
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
     * answers `cancelled` (grouped-appends.ts), even once a new message re-opened the session,
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
    // A tenant's session list, newest activity first, paged by (updated_at, id) (the console).
    index("sessions_tenant_updated_idx").on(t.tenant, t.updatedAt, t.id),
    // The parked queue: a few sessions among millions, listed without scanning the rest.
    index("sessions_tenant_parked_idx").on(t.tenant, t.updatedAt, t.id).where(sql`${t.status} = 'parked'`),
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
     * `crashClockStart`); fleet_crash_to_resume_seconds counts from it.
     */
    lastSignAt: timestamp("last_sign_at", { withTimezone: true }),
    jobId: text("job_id"),
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

/** API keys (contracts §10): only the SHA-256 of a key is stored, never the key. */
export const apiKeys = pgTable(
  "api_keys",
  {
    id: text("id").primaryKey(),
    tenant: text("tenant").notNull(),
    /** sha256 hex of the whole key. */
    hash: text("hash").notNull(),
    /** What `fleet keys list` shows of the key, e.g. `fk_3f9a2c1b_Qx7m…`. */
    prefix: text("prefix").notNull(),
    /** Whether the key opens admin routes (Bull Board at /admin/queues), which show every tenant's jobs. */
    admin: boolean("admin").notNull().default(false),
    createdAt: timestamp("created_at", { withTimezone: true }).notNull().defaultNow(),
    revokedAt: timestamp("revoked_at", { withTimezone: true }),
  },
  (t) => [uniqueIndex("api_keys_hash_idx").on(t.hash)],
);

/**
 * Batches (contracts §9). Counts are never stored here: they are computed from the state of
 * the batch's sessions and runs, so they cannot drift across crashes and resumes.
 */
export const batches = pgTable(
  "batches",
  {
    id: text("id").primaryKey(),
    tenant: text("tenant").notNull(),
    /** Where the batch JSON is POSTed once it has ended (http/https, checked at submit). */
    webhookUrl: text("webhook_url"),
    /** An open batch takes more sessions (`POST /v1/batches/:id/sessions`) and does not end. */
    open: boolean("open").notNull().default(false),
    /** `sessionEvents` of every session created in it (also those appended to an open batch). */
    sessionEvents: boolean("session_events").notNull().default(true),
    createdAt: timestamp("created_at", { withTimezone: true }).notNull().defaultNow(),
    /** Set once every session was seen terminal (by the sweeper or a read). */
    endedAt: timestamp("ended_at", { withTimezone: true }),
    cancelledAt: timestamp("cancelled_at", { withTimezone: true }),
    webhookDeliveredAt: timestamp("webhook_delivered_at", { withTimezone: true }),
    /** Set when every delivery attempt failed (after at least 24 h). */
    webhookFailedAt: timestamp("webhook_failed_at", { withTimezone: true }),
    /**
     * Why the last delivery attempt failed, or why it was given up (webhook-errors.ts: one
     * line, at most 300 characters, no answer body); null until an attempt fails.
     */
    webhookLastError: text("webhook_last_error"),
    /**
     * Set by `DELETE /v1/batches/:id` (or retention): from then on the batch answers 404 and
     * owes no webhook; its sessions are deleted in chunks, then this row (data-deletion.ts).
     */
    deletedAt: timestamp("deleted_at", { withTimezone: true }),
  },
  (t) => [
    // Batches that have not ended, or whose webhook is still owed: the sweeper's scans.
    index("batches_unsettled_idx")
      .on(t.createdAt)
      .where(
        sql`${t.endedAt} is null or (${t.webhookUrl} is not null and ${t.webhookDeliveredAt} is null and ${t.webhookFailedAt} is null)`,
      ),
    index("batches_tenant_idx").on(t.tenant, t.createdAt),
    // Deletions left unfinished (the API stopped mid-way): the sweeper finishes them.
    index("batches_deleted_idx").on(t.deletedAt).where(sql`${t.deletedAt} is not null`),
    // Retention: ended batches, oldest end first.
    index("batches_ended_idx").on(t.endedAt).where(sql`${t.endedAt} is not null and ${t.deletedAt} is null`),
  ],
);

/**
 * `Idempotency-Key` (contracts §9): the row is inserted before the request acts, so a second
 * request with the same key waits for the first one's answer instead of acting again.
 */
export const idempotencyKeys = pgTable(
  "idempotency_keys",
  {
    tenant: text("tenant").notNull(),
    key: text("key").notNull(),
    /** sha256 of the method, the path and the body. */
    requestHash: text("request_hash").notNull(),
    /**
     * The method and path the key was first used with (`POST /v1/batches`), named in the 409
     * of a request with the same key to another one; never its body. Null for keys claimed
     * before migration 0020.
     */
    requestLine: text("request_line"),
    /** Null while the first request is still being answered. */
    statusCode: integer("status_code"),
    response: text("response"),
    createdAt: timestamp("created_at", { withTimezone: true }).notNull().defaultNow(),
  },
  (t) => [primaryKey({ columns: [t.tenant, t.key] }), index("idempotency_keys_created_idx").on(t.createdAt)],
);

export type BatchRow = typeof batches.$inferSelect;
export type SessionRow = typeof sessions.$inferSelect;
export type MessageRow = typeof messages.$inferSelect;
export type RunRow = typeof runs.$inferSelect;
export type ApiKeyRow = typeof apiKeys.$inferSelect;

/**
 * Which fleet (FLEET_PREFIX) this database belongs to: one row, written by the first
 * process that starts. A process of another prefix is refused at start, so two fleets never
 * take each other's workers for dead (fleet-identity.ts).
 */
export const fleetIdentity = pgTable("fleet_identity", {
  id: integer("id").primaryKey().default(1),
  prefix: text("prefix").notNull(),
  createdAt: timestamp("created_at", { withTimezone: true }).notNull().defaultNow(),
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
 * Each tenant's webhook signing secret's generation (FLEET_WEBHOOK_SECRET_PER_TENANT,
 * webhook-secrets.ts): no row is generation 0, the secret derived as before rotations existed.
 * `POST /v1/webhook-secret/rotate` adds one; until `previous_valid_until` deliveries are also
 * signed with the generation before (tenant-webhook-secrets.ts).
 */
export const webhookSecretGenerations = pgTable("webhook_secret_generations", {
  tenant: text("tenant").primaryKey(),
  generation: integer("generation").notNull(),
  rotatedAt: timestamp("rotated_at", { withTimezone: true }).notNull().defaultNow(),
  previousValidUntil: timestamp("previous_valid_until", { withTimezone: true }).notNull(),
});
