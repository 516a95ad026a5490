/** What a worker job needs (session-job.ts) and what it answers; its runs get the same (process-run.ts). */
import type { Logger } from "pino";
import type { ModelConfig } from "../shared/agent-config.js";
import type { RunRow } from "../shared/db/schema.js";
import type { EventWriter } from "../shared/event-writer.js";
import type { LeaseStore } from "../shared/lease.js";
import type { FleetMetrics } from "../shared/metrics.js";
import type { ParsedAgents } from "../shared/parsed-agents.js";
import type { AutomaticResumes } from "../shared/store/automatic-resumes.js";
import type { FencedWrites } from "../shared/store/fenced-writes.js";
import type { SessionQueries } from "../shared/store/session-queries.js";
import type { CapacityDeps } from "./hand-back.js";
import type { HistoryCache } from "./history-cache.js";
import type { Extensions } from "./hook-runner.js";
import type { AgentLoopDeps } from "./loop-types.js";
import type { ModelProvider } from "./models/provider.js";
import type { NewerAgentDeps } from "./newer-agent-wait.js";
import type { RunOutcome } from "./run-outcome.js";

export type SessionJobDeps = AgentLoopDeps & {
  workerId: string;
  queries: Pick<SessionQueries, "nextQueuedRun"> & Partial<Pick<SessionQueries, "getSession" | "runModels">>;
  writes: Pick<FencedWrites, "append" | "claimSession" | "startRun" | "endRun" | "reserveModelCall"> &
    Partial<
      Pick<
        FencedWrites,
        "appendStep" | "appendAndEndRun" | "holdsEpoch" | "findCommitted" | "recordRunFailure"
      >
    >;
  lease: LeaseStore;
  leaseTtlMs: number;
  /** Builds a model's provider; throws a ValidationError naming `field` for a route not allowed (contracts §11). */
  models: (config: ModelConfig, field: string) => ModelProvider;
  metrics: Pick<
    FleetMetrics,
    | "modelStops"
    | "toolCalls"
    | "runs"
    | "resumes"
    | "resumeRefusals"
    | "fencedWrites"
    | "crashToResume"
    | "sessionsParked"
  > &
    Partial<Pick<FleetMetrics, "historyMessagesRead" | "leaseWaits" | "leaseRetakes" | "dbRideouts">>;
  /**
   * FLEET_WORKER_DB_RIDEOUT_MS: how long a run's write that failed with Postgres unavailable
   * is tried again while the job keeps its session (db-rideout.ts); absent or 0: not at all.
   */
  dbRideoutMs?: number;
  /** Every automatic resume a worker asks for is decided and counted there. */
  resumes: Pick<AutomaticResumes, "schedule">;
  /** Tells the sweepers that a run stopped short, so they need not wait for their next poll. */
  reportStop: (sessionId: string, outcome: RunOutcome) => Promise<void>;
  /** Queues a run's job (used when this worker itself asks for a resume), after `delayMs`. */
  enqueue: (run: RunRow, delayMs: number) => Promise<void>;
  log: Pick<Logger, "info" | "warn" | "error" | "debug">;
  /** Session events (contracts §7); absent: none are written. */
  events?: EventWriter;
  /** The loaded extensions' hooks (contracts §8); absent: none. */
  extensions?: Extensions;
  /** Long histories kept from job to job (history-cache.ts); absent: every claim reads the whole history. */
  histories?: Pick<HistoryCache, "take" | "put">;
  /**
   * Takes what a job that ended its work ("done") still has to do: wait for its last event
   * writes (at most 1 s), then release the lease. The job's slot is then freed without waiting
   * for those round trips (the worker waits for them before it closes Redis). Absent: the job
   * does them itself before it returns.
   */
  afterJob?: (closing: Promise<void>) => void;
  /** Stored agents parsed once per process (parsed-agents.ts); absent: each job parses its own. */
  agents?: Pick<ParsedAgents, "parse">;
  /** Provider limits (contracts §15): endpoint gates and hand-backs; absent: no gate. */
  capacity?: CapacityDeps;
  /**
   * Agents a newer release wrote are handed back for a while (newer-agent-wait.ts), with
   * `capacity` (which continues a handed-back run); absent: they end `invalid_agent` at once.
   */
  newerAgents?: NewerAgentDeps;
};

/** `handedBack`: a run waits for its endpoint's capacity; the job is to wait that many ms (contracts §15). */
export type JobResult = "done" | "busy" | "fenced" | { handedBack: number };
