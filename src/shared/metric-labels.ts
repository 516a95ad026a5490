/**
 * The label values of the metrics (metrics.ts), written once from the code's own constants,
 * so that every combination the code can produce is started at 0 when the metrics are
 * created.
 */
import { TENANT_LIMITS } from "./errors.js";
import { NOT_RESUMABLE_REASONS, type RefusalReason } from "./resume-reasons.js";
import { STOP_REASONS, type stopReasonLabel } from "./stop-reasons.js";
import type { NewRun } from "./store/session-queries.js";

/**
 * A label set written once from the code's own constants; tsc checks it holds every value
 * of `T` (a value the code gains and this list lacks is a compile error here).
 */
const everyValueOf =
  <T extends string>() =>
  <const L extends readonly T[]>(values: L & ([T] extends [L[number]] ? unknown : { missing: T })) =>
    values;

/** `trigger` of `fleet_resumes_total` (contracts §6): who asked for the resume (the CLI asks through the API). */
export const RESUME_TRIGGERS = everyValueOf<NewRun["trigger"]>()(["api", "sweeper", "worker"]);
/** `kind` of `fleet_runs_total`. */
export const RUN_KINDS = everyValueOf<NewRun["kind"]>()(["run", "resume"]);
/** `reason` of `fleet_resume_refusals_total`: the history's reasons, and `running` (contracts §12). */
export const REFUSAL_REASONS = everyValueOf<RefusalReason>()([...NOT_RESUMABLE_REASONS, "running"]);
/** `stop_reason` of `fleet_model_stops_total`: the normalised reasons, unknown ones as `other`. */
export const STOP_REASON_LABELS = everyValueOf<ReturnType<typeof stopReasonLabel>>()([
  ...STOP_REASONS,
  "other",
]);
/** `outcome` of `fleet_tool_calls_total` (contracts §6). */
export const TOOL_OUTCOMES = ["ok", "failed", "interrupted"] as const;
/** `tool` of a call to a name this worker has not registered (`toolLabel` in worker/tools/registry.ts). */
export const UNREGISTERED_TOOL = "unregistered";
/** Labels of `fleet_model_tokens_total` (contracts §13). */
export const MODEL_TOKEN_PROVIDERS = ["openai", "anthropic"] as const;
export const MODEL_TOKEN_KINDS = ["input", "output", "cache_read", "cache_write", "reasoning"] as const;
/** `hook` of `fleet_hook_failures_total` (contracts §8). */
export const HOOK_NAMES = [
  "beforeRun",
  "onMessage",
  "onCommitted",
  "afterRun",
  "onError",
  "onSessionDeleted",
] as const;
/** Types of batch events (contracts §7), counted in `fleet_events_written_total` too. */
export const BATCH_EVENT_TYPES = ["SESSION_ENDED", "BATCH_COMPLETED"] as const;

/** Who deleted sessions (`fleet_sessions_deleted_total{trigger}`): a request, or retention. */
export const DELETE_TRIGGERS = ["api", "retention"] as const;

/**
 * `outcome` of `fleet_webhook_deliveries_total` (contracts §9): an attempt the receiver took
 * (2xx), one that failed and will be tried again, and the last one failing (the batch's
 * webhook is given up: `webhook_failed_at`).
 */
export const WEBHOOK_OUTCOMES = ["delivered", "failed", "abandoned"] as const;

/** `limit` of `fleet_requests_limited_total`: every limit the API answers 429 for. */
export const REQUEST_LIMITS = TENANT_LIMITS;

/** `stream` of `fleet_event_places_gone_total`: a session's event stream, or a batch's. */
export const EVENT_STREAM_KINDS = ["session", "batch"] as const;

/** `result` of `fleet_lease_retakes_total` (lease-keeper.ts `afterEpochCheck`). */
export const LEASE_RETAKE_RESULTS = ["verified", "lost"] as const;
/** How a wait for a lapsed session lease ended (`fleet_lease_wait_seconds{result}`, lease-guard.ts). */
export const LEASE_WAIT_RESULTS = ["proven", "lost", "timed_out"] as const;
export type LeaseWaitResult = (typeof LEASE_WAIT_RESULTS)[number];

/**
 * How a worker's ride-out of a Postgres outage ended (`fleet_db_rideouts_total{result}`,
 * src/worker/db-rideout.ts): the write went through (or was found committed); the window
 * passed or the job was stopped (the job fails as before); the lease was lost meanwhile.
 */
export const DB_RIDEOUT_RESULTS = ["stored", "gave_up", "fenced"] as const;
export type DbRideoutResult = (typeof DB_RIDEOUT_RESULTS)[number];

/** `result` of `fleet_retention_passes_total`: a pass that deleted all it found, or left some. */
export const RETENTION_RESULTS = ["caught_up", "more_left"] as const;

/** `outcome` of `fleet_model_requests_total` (contracts §15). */
export const MODEL_REQUEST_OUTCOMES = ["ok", "rate_limited", "error"] as const;
