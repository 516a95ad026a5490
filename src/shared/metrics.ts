/**
 * Prometheus metrics of contracts.md §6, on a dedicated registry (never the global one).
 * Labels never carry a session, job, run or tenant id.
 */
import { Counter, collectDefaultMetrics, Gauge, Histogram, Registry } from "prom-client";

export type FleetMetrics = ReturnType<typeof createMetrics>;

/** Queue depths by queue and state, read at scrape time by the one process that exports them. */
export type QueueDepths = () => Promise<{ queue: string; state: string; count: number }[]>;

export function createMetrics(role: string, options: { queueDepths?: QueueDepths } = {}) {
  const registry = new Registry();
  registry.setDefaultLabels({ role });
  collectDefaultMetrics({ register: registry, prefix: "fleet_process_" });
  const registers = [registry];
  return {
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
    crashToResume: new Histogram({
      name: "fleet_crash_to_resume_seconds",
      help: "From an interrupted run's last sign of life to its resume starting.",
      buckets: [0.05, 0.1, 0.25, 0.5, 1, 2, 5, 10, 30, 60, 120],
      registers,
    }),
    fencedWrites: new Counter({
      name: "fleet_fenced_writes_total",
      help: "Appends refused because the writer had lost its lease.",
      registers,
    }),
    sessionsParked: new Counter({
      name: "fleet_sessions_parked_total",
      help: "Sessions parked (nothing will run them until someone acts), by reason.",
      labelNames: ["reason"] as const,
      registers,
    }),
    queueJobs: options.queueDepths ? queueGauge(options.queueDepths, registers) : null,
  };
}

function queueGauge(depths: QueueDepths, registers: Registry[]) {
  return new Gauge({
    name: "fleet_queue_jobs",
    help: "Jobs in each queue by state (exported by one process only).",
    labelNames: ["queue", "state"] as const,
    registers,
    async collect() {
      for (const { queue, state, count } of await depths()) this.set({ queue, state }, count);
    },
  });
}
