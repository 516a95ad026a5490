/**
 * The metrics of runs and of what happens to their sessions (contracts.md §6): resumes and
 * their refusals, runs ended, model stops, tool calls, crash-to-resume time, fenced writes,
 * history reads, lease waits and retakes, Postgres ride-outs, parked sessions. metrics.ts
 * `createMetrics` registers them with the rest and starts their fixed series at 0.
 */
import { Counter, Gauge, Histogram, type Registry } from "prom-client";
import { TOOL_OUTCOMES, UNREGISTERED_TOOL } from "./metric-labels.js";

export type RunMetrics = ReturnType<typeof runMetrics>;

/** Registers the run metrics on `registers`, in this order (the order /metrics lists them in). */
export function runMetrics(registers: Registry[]) {
  return {
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
  };
}

/**
 * Starts the `fleet_tool_calls_total` series of these tools (and of `unregistered`) at 0, for
 * every outcome, and their `fleet_tool_timeouts_total` and `fleet_tools_abandoned` (only a
 * registered tool runs, so only one can time out or be abandoned): called by the worker once
 * its tool registry is built.
 */
export function initToolSeries(
  metrics: Pick<RunMetrics, "toolCalls"> & Partial<Pick<RunMetrics, "toolTimeouts" | "toolsAbandoned">>,
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
