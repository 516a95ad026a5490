/**
 * Prometheus metrics of contracts.md §6, on a dedicated registry (never the global one).
 * Labels never carry a session, job, run or tenant id.
 *
 * Every label combination the code can produce starts at 0 when the metrics are created
 * (the tools' series when the worker knows its tools: `initToolSeries`). prom-client would
 * otherwise create a series at its first `inc()`, so Prometheus would first see it at N
 * and `rate()`/`increase()` would never count that jump: a dashboard would show 0 resumes,
 * crashes or parked sessions that did happen.
 *
 * The label values are metric-labels.ts, the queue-depth gauge queue-depths-gauge.ts, and
 * the worker's and the sweeper's own liveness gauges liveness-metrics.ts.
 */
import { Counter, collectDefaultMetrics, Gauge, Histogram, Registry } from "prom-client";
import { EVENT_TYPES } from "./events.js";
import {
  BATCH_EVENT_TYPES,
  DB_RIDEOUT_RESULTS,
  DELETE_TRIGGERS,
  EVENT_STREAM_KINDS,
  HOOK_NAMES,
  LEASE_RETAKE_RESULTS,
  LEASE_WAIT_RESULTS,
  MODEL_REQUEST_OUTCOMES,
  MODEL_TOKEN_KINDS,
  MODEL_TOKEN_PROVIDERS,
  REFUSAL_REASONS,
  REQUEST_LIMITS,
  RESUME_TRIGGERS,
  RETENTION_RESULTS,
  RUN_KINDS,
  STOP_REASON_LABELS,
  TOOL_OUTCOMES,
  UNREGISTERED_TOOL,
  WEBHOOK_OUTCOMES,
} from "./metric-labels.js";
import { type QueueDepths, queueGauge } from "./queue-depths-gauge.js";
import { PARK_REASONS } from "./resume-policy.js";
import { RESUME_KINDS } from "./resume-reasons.js";
import { RUN_OUTCOMES } from "./run-outcomes.js";

export {
  initRunProgress,
  initSweeperPasses,
  initWorkerLiveness,
  type RunProgressGauges,
  SWEEPER_PASSES,
} from "./liveness-metrics.js";
// Every label set, and the types of two of them.
export * from "./metric-labels.js";
export { QUEUE_DEPTHS_TIMEOUT_MS, type QueueDepths } from "./queue-depths-gauge.js";

export type FleetMetrics = ReturnType<typeof createMetrics>;

export function createMetrics(role: string, options: { queueDepths?: QueueDepths } = {}) {
  const registry = new Registry();
  registry.setDefaultLabels({ role });
  collectDefaultMetrics({ register: registry, prefix: "fleet_process_" });
  const registers = [registry];
  const metrics = {
    registry,
    resumes: new Counter({
      name: "fleet_resumes_total",
      help: "Resumes started, by resume kind and by who triggered them.",
      labelNames: ["kind", "trigger"] as const,
      registers,
    }),
    resumeRefusals: new Counter({
      name: "fleet_resume_refusals_total",
      help: "Resumes refused because there was nothing to resume, by reason.",
      labelNames: ["reason"] as const,
      registers,
    }),
    runs: new Counter({
      name: "fleet_runs_total",
      help: "Runs ended, by kind (run, resume) and outcome.",
      labelNames: ["kind", "outcome"] as const,
      registers,
    }),
    modelStops: new Counter({
      name: "fleet_model_stops_total",
      help: "Model steps ended, by normalised stop reason (unknown values as other).",
      labelNames: ["stop_reason"] as const,
      registers,
    }),
    toolCalls: new Counter({
      name: "fleet_tool_calls_total",
      help: "Tool calls answered, by tool and outcome (ok, failed, interrupted).",
      labelNames: ["tool", "outcome"] as const,
      registers,
    }),
    toolTimeouts: new Counter({
      name: "fleet_tool_timeouts_total",
      help: "Tool calls answered as failed because they passed their time limit (FLEET_TOOL_TIMEOUT_MS or the tool's own), by tool; also counted failed in fleet_tool_calls_total.",
      labelNames: ["tool"] as const,
      registers,
    }),
    /** Tools a call stopped waiting for (deaf to their signal) that have not ended yet (tool-call.ts). */
    toolsAbandoned: new Gauge({
      name: "fleet_tools_abandoned",
      help: "Tool calls answered while their tool still runs on this worker (it ignored its signal past the grace after a time limit, cancel, shutdown or lost lease), by tool; down again when the tool ends.",
      labelNames: ["tool"] as const,
      registers,
    }),
    crashToResume: new Histogram({
      name: "fleet_crash_to_resume_seconds",
      help: "From an interrupted run's last sign of life to its resume starting, less the backoff an automatic resume waits on purpose.",
      // Fine between 2 and 10 s, where a frozen worker's sessions land (its lease, 5 s by
      // default, then a sweep): a p99 of such resumes (5.1 s) reads 6 s, not 9.8 (buckets 5, 10).
      buckets: [0.05, 0.1, 0.25, 0.5, 1, 2, 3, 4, 5, 6, 7.5, 10, 15, 30, 60, 120],
      registers,
    }),
    fencedWrites: new Counter({
      name: "fleet_fenced_writes_total",
      help: "Appends refused because the writer had lost its lease.",
      registers,
    }),
    historyMessagesRead: new Counter({
      name: "fleet_history_messages_read_total",
      help: "Stored messages a worker's claims read (a history kept from an earlier job is read from where it ends).",
      registers,
    }),
    /** A write or tool start that found its session lease lapsed (Redis away) and waited (lease-guard.ts). */
    leaseWaits: new Histogram({
      name: "fleet_lease_wait_seconds",
      help: "Writes and tool starts that found their session lease lapsed (Redis unreachable) and waited for a renewal to prove it again, by result (proven: went on; lost; timed_out: after LEASE_OUTAGE_WAIT_MS, 60 s).",
      labelNames: ["result"] as const,
      buckets: [0.1, 0.5, 1, 2, 5, 10, 20, 30, 60],
      registers,
    }),
    /** A renewal found the lease key gone (expired during an outage, Redis restarted empty) and took it back (lease-keeper.ts). */
    leaseRetakes: new Counter({
      name: "fleet_lease_retakes_total",
      help: "Session leases found gone after a Redis outage and taken back, by the epoch check's result (verified: the job went on; lost: another holder had moved the session, the job stopped).",
      labelNames: ["result"] as const,
      registers,
    }),
    /** A session's write that failed with Postgres unavailable and was tried again (db-rideout.ts). */
    dbRideouts: new Counter({
      name: "fleet_db_rideouts_total",
      help: "Writes of a run in progress that failed with Postgres unavailable and were tried again while the worker kept the session, by result (stored: went through, the run went on; gave_up: past FLEET_WORKER_DB_RIDEOUT_MS or the job stopped, the run is resumed; fenced: the lease was lost meanwhile).",
      labelNames: ["result"] as const,
      registers,
    }),
    sessionsParked: new Counter({
      name: "fleet_sessions_parked_total",
      help: "Sessions parked (nothing will run them until someone acts), by reason.",
      labelNames: ["reason"] as const,
      registers,
    }),
    /** Sessions deleted with their messages and runs (DELETE /v1/…, FLEET_RETENTION_DAYS). */
    sessionsDeleted: new Counter({
      name: "fleet_sessions_deleted_total",
      help: "Sessions deleted with their messages and runs, by trigger (api, retention).",
      labelNames: ["trigger"] as const,
      registers,
    }),
    /** Batch webhook delivery attempts (the sweeper delivers them), by outcome. */
    webhookDeliveries: new Counter({
      name: "fleet_webhook_deliveries_total",
      help: "Batch webhook delivery attempts, by outcome (delivered; failed, tried again; abandoned: the last attempt failed).",
      labelNames: ["outcome"] as const,
      registers,
    }),
    /** The sweeper's retention passes (FLEET_RETENTION_DAYS, unfinished batch deletions). */
    retentionPasses: new Counter({
      name: "fleet_retention_passes_total",
      help: "Retention passes, by result (caught_up; more_left: the pass reached its limit with more to delete).",
      labelNames: ["result"] as const,
      registers,
    }),
    /** The API's refused credentials (401 for a key sent): unknown, revoked or malformed keys. */
    authFailures: new Counter({
      name: "fleet_auth_failures_total",
      help: "Requests whose API key was refused (401), on this API process.",
      registers,
    }),
    /** The API's 429 answers (contracts §12), by the limit that refused the request. */
    requestsLimited: new Counter({
      name: "fleet_requests_limited_total",
      help: "Requests answered 429, by limit (active_sessions, request_rate, event_streams, auth_failures: too many failed authentications from the address, queued_runs: too many runs waiting on one session, big_bodies: too many big request bodies at once on one API process, big_answers: too many whole answers of big sessions at once there).",
      labelNames: ["limit"] as const,
      registers,
    }),
    queueJobs: options.queueDepths ? queueGauge(options.queueDepths, registers) : null,
    /** Contracts §13: tokens providers reported (`input` counts cached tokens too). */
    modelTokens: new Counter({
      name: "fleet_model_tokens_total",
      help: "Model tokens the providers reported, by provider and kind (input includes cached tokens).",
      labelNames: ["provider", "kind"] as const,
      registers,
    }),
    /** Contracts §7: session events written to Redis, by type. */
    eventsWritten: new Counter({
      name: "fleet_events_written_total",
      help: "Session events written to their Redis stream, by type.",
      labelNames: ["type"] as const,
      registers,
    }),
    /** Contracts §7: event streams (SSE) this API process is serving now. */
    sseClients: new Gauge({
      name: "fleet_sse_clients",
      help: "Event streams (SSE) open on this API process.",
      registers,
    }),
    /** Contracts §7: reconnects answered 410 (their place was trimmed or expired away), by stream kind. */
    eventPlacesGone: new Counter({
      name: "fleet_event_places_gone_total",
      help: "Event stream reconnects answered 410: the Last-Event-ID's place is no longer kept (trimmed by FLEET_EVENTS_MAX / FLEET_EVENTS_MAX_BYTES, expired, or lost with Redis), by stream (session, batch).",
      labelNames: ["stream"] as const,
      registers,
    }),
    /** Contracts §8: extension hooks that threw (beforeRun included: it ends the run failed). */
    hookFailures: new Counter({
      name: "fleet_hook_failures_total",
      help: "Extension hooks that threw, by hook.",
      labelNames: ["hook"] as const,
      registers,
    }),
    /** Contracts §15: from a request's first ask for capacity to its slot (hand-backs included). */
    endpointWait: new Histogram({
      name: "fleet_endpoint_wait_seconds",
      help: "Time a model request waited for its endpoint's capacity (fleet-wide limits, 429 pauses), by endpoint.",
      labelNames: ["endpoint"] as const,
      buckets: [0.01, 0.1, 0.5, 1, 2, 5, 10, 30, 60, 120, 300],
      registers,
    }),
    /** Contracts §15: requests sent to declared endpoints, by outcome. */
    modelRequests: new Counter({
      name: "fleet_model_requests_total",
      help: "Model requests sent to a declared endpoint, by endpoint and outcome (ok, rate_limited, error).",
      labelNames: ["endpoint", "outcome"] as const,
      registers,
    }),
    /** Contracts §15: the limits each declared endpoint has (FLEET_MODEL_ENDPOINTS), 0 when none. */
    endpointLimit: new Gauge({
      name: "fleet_endpoint_limit",
      help: "Declared limit of an endpoint (requests_per_minute, tokens_per_minute, max_concurrent); 0: none.",
      labelNames: ["endpoint", "limit"] as const,
      registers,
    }),
    /** Redis's maxmemory-policy as this process last read it: at start, then every FLEET_EVICTION_CHECK_MS (eviction-policy.ts). */
    redisEvictionPolicySafe: new Gauge({
      name: "fleet_redis_eviction_policy_safe",
      help: "Redis maxmemory-policy, read at start and every FLEET_EVICTION_CHECK_MS: 1 noeviction, 0 another policy (Redis may evict leases, jobs, events), -1 not known.",
      registers,
    }),
  };
  // Every fixed combination at 0 (the histogram and the unlabelled counter start at 0 by themselves).
  for (const kind of RESUME_KINDS)
    for (const trigger of RESUME_TRIGGERS) metrics.resumes.inc({ kind, trigger }, 0);
  for (const reason of REFUSAL_REASONS) metrics.resumeRefusals.inc({ reason }, 0);
  for (const kind of RUN_KINDS) for (const outcome of RUN_OUTCOMES) metrics.runs.inc({ kind, outcome }, 0);
  for (const stop_reason of STOP_REASON_LABELS) metrics.modelStops.inc({ stop_reason }, 0);
  for (const reason of PARK_REASONS) metrics.sessionsParked.inc({ reason }, 0);
  for (const provider of MODEL_TOKEN_PROVIDERS)
    for (const kind of MODEL_TOKEN_KINDS) metrics.modelTokens.inc({ provider, kind }, 0);
  for (const type of EVENT_TYPES) metrics.eventsWritten.inc({ type }, 0);
  for (const type of BATCH_EVENT_TYPES) metrics.eventsWritten.inc({ type }, 0);
  for (const hook of HOOK_NAMES) metrics.hookFailures.inc({ hook }, 0);
  for (const trigger of DELETE_TRIGGERS) metrics.sessionsDeleted.inc({ trigger }, 0);
  for (const outcome of WEBHOOK_OUTCOMES) metrics.webhookDeliveries.inc({ outcome }, 0);
  for (const result of RETENTION_RESULTS) metrics.retentionPasses.inc({ result }, 0);
  for (const stream of EVENT_STREAM_KINDS) metrics.eventPlacesGone.inc({ stream }, 0);
  for (const limit of REQUEST_LIMITS) metrics.requestsLimited.inc({ limit }, 0);
  for (const result of LEASE_WAIT_RESULTS) metrics.leaseWaits.zero({ result });
  for (const result of LEASE_RETAKE_RESULTS) metrics.leaseRetakes.inc({ result }, 0);
  for (const result of DB_RIDEOUT_RESULTS) metrics.dbRideouts.inc({ result }, 0);
  metrics.sseClients.set(0);
  metrics.redisEvictionPolicySafe.set(-1);
  initToolSeries(metrics, []);
  return metrics;
}

/**
 * Starts the `fleet_tool_calls_total` series of these tools (and of `unregistered`) at 0, for
 * every outcome, and their `fleet_tool_timeouts_total` and `fleet_tools_abandoned` (only a
 * registered tool runs, so only one can time out or be abandoned): called by the worker once
 * its tool registry is built.
 */
export function initToolSeries(
  metrics: Pick<FleetMetrics, "toolCalls"> & Partial<Pick<FleetMetrics, "toolTimeouts" | "toolsAbandoned">>,
  names: Iterable<string>,
): void {
  const registered = [...names];
  for (const tool of [...registered, UNREGISTERED_TOOL])
    for (const outcome of TOOL_OUTCOMES) metrics.toolCalls.inc({ tool, outcome }, 0);
  for (const tool of registered) {
    metrics.toolTimeouts?.inc({ tool }, 0);
    metrics.toolsAbandoned?.set({ tool }, 0);
  }
}

/**
 * Starts the series of the declared endpoints (contracts §15) at 0 — their names come from
 * FLEET_MODEL_ENDPOINTS, known at start — and sets `fleet_endpoint_limit`.
 */
export function initEndpointSeries(
  metrics: Pick<FleetMetrics, "endpointWait" | "modelRequests" | "endpointLimit">,
  endpoints: Iterable<{
    name: string;
    limits?: { requestsPerMinute?: number; tokensPerMinute?: number; maxConcurrent?: number };
  }>,
): void {
  for (const { name, limits } of endpoints) {
    for (const outcome of MODEL_REQUEST_OUTCOMES) metrics.modelRequests.inc({ endpoint: name, outcome }, 0);
    metrics.endpointWait.zero({ endpoint: name });
    const declared = {
      requests_per_minute: limits?.requestsPerMinute,
      tokens_per_minute: limits?.tokensPerMinute,
      max_concurrent: limits?.maxConcurrent,
    };
    for (const [limit, value] of Object.entries(declared))
      metrics.endpointLimit.set({ endpoint: name, limit }, value ?? 0);
  }
}
