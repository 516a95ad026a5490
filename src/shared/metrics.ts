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
 * The label values are metric-labels.ts, the runs' metrics (and their tools' series)
 * run-metrics.ts, the queue-depth gauge queue-depths-gauge.ts, and the worker's and the
 * sweeper's own liveness gauges liveness-metrics.ts.
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
  WEBHOOK_OUTCOMES,
} from "./metric-labels.js";
import { type QueueDepths, queueGauge } from "./queue-depths-gauge.js";
import { PARK_REASONS } from "./resume-policy.js";
import { RESUME_KINDS } from "./resume-reasons.js";
import { initToolSeries, runMetrics } from "./run-metrics.js";
import { RUN_OUTCOMES } from "./run-outcomes.js";

export {
  initRunProgress,
  initSweeperIntervals,
  initSweeperPasses,
  initWorkerLiveness,
  type RunProgressGauges,
  SWEEPER_PASSES,
} from "./liveness-metrics.js";
// Every label set, and the types of two of them.
export * from "./metric-labels.js";
export { QUEUE_DEPTHS_TIMEOUT_MS, type QueueDepths } from "./queue-depths-gauge.js";
export { initToolSeries } from "./run-metrics.js";

export type FleetMetrics = ReturnType<typeof createMetrics>;

export function createMetrics(role: string, options: { queueDepths?: QueueDepths } = {}) {
  const registry = new Registry();
  registry.setDefaultLabels({ role });
  collectDefaultMetrics({ register: registry, prefix: "fleet_process_" });
  const registers = [registry];
  const metrics = {
    registry,
    ...runMetrics(registers),
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
      help: "Requests answered 429, by limit (active_sessions, request_rate, event_streams, auth_failures: too many failed authentications from the address, queued_runs: too many runs waiting on one session, big_bodies: too many big request bodies at once on one API process, big_answers: too many whole answers of big sessions at once there, results_reads: too many batch results reads of one tenant open there).",
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
    /**
     * Losses of Redis's data a sweeper saw (redis-data-loss.ts): every sweeper that looked
     * before counts the same loss, so the fleet's count is the max over sweepers, not the sum.
     */
    redisDataLosses: new Counter({
      name: "fleet_redis_data_losses_total",
      help: "Times this sweeper saw Redis lose its data (FLUSHALL, or a restart or failover without persistence behind a proxy that kept the connection): its marker key gone or changed. Every sweeper counts each loss it saw, so aggregate with max by () (increase(...)), not sum. 0 on other roles.",
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
