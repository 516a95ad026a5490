/**
 * What the sweeper is built with (`SweeperDeps`) and what one sweep reports (`SweepResult`).
 */
import type { Redis } from "ioredis";
import type { Logger } from "pino";
import type { SessionLease } from "../shared/lease.js";
import type { FleetMetrics } from "../shared/metrics.js";
import type { RunQueues } from "../shared/queues.js";
import type { AutomaticResumes } from "../shared/store/automatic-resumes.js";
import type { SessionQueries } from "../shared/store/session-queries.js";
import type { RunProgress } from "./run-progress.js";
import type { AbandonedRunEnd, SweepQueries } from "./sweep-queries.js";

export type SweeperDeps = {
  prefix: string;
  redis: Redis;
  lease: SessionLease;
  queries: Pick<SessionQueries, "getSession" | "getRun">;
  sweeps: SweepQueries;
  /** Every automatic resume and retry is decided and counted there. */
  resumes: Pick<AutomaticResumes, "schedule" | "countRetry" | "backoffLeftMs" | "payOwedParks">;
  queues: Pick<RunQueues, "enqueue" | "getJob" | "getActive" | "jobStates">;
  metrics: Pick<FleetMetrics, "runs" | "redisDataLosses">;
  log: Pick<Logger, "info" | "warn" | "debug">;
  /** Told every running run at each look for abandoned ones: runs alive but making no progress. */
  progress?: Pick<RunProgress, "observe">;
  /**
   * The clock of its durations (death confirmation, Redis trouble, sweep-lock checks), in ms.
   * Default: a monotonic one, so that a step of the host's wall clock (NTP) neither delays
   * nor hastens a judgement.
   */
  now?: () => number;
  /**
   * Writes the RUN_COMPLETED of a run this sweeper ended (contracts §7), after every stored
   * message the session's event stream lacks, up to `through`: the session's last stored seq
   * as the end left it (a stream already past it, a later run's messages, gets no end). Absent: no events.
   */
  runEnded?: (sessionId: string, runId: string, outcome: AbandonedRunEnd, through?: number) => Promise<void>;
  /**
   * Writes the RUN_COMPLETED of the session's last run when its stream lacks it (its worker
   * died between committing the end and writing it; `EventWriter.missingRunEnd`), before a
   * resume's RUN_STARTED can follow it. Absent: no events.
   */
  runEndMissing?: (sessionId: string) => Promise<unknown>;
  /**
   * The client name of `redis` (`sweeperName`). Each sweep lock's token starts with it, and a
   * lock whose holder's name is missing from CLIENT LIST in two looks `confirmDeathMs` apart
   * (the holder was SIGKILLed: the kernel closed its socket) is taken over at once, not after
   * its 10 s TTL. Absent: this sweeper's locks only expire.
   */
  name?: string;
  /**
   * Aborted when the process stops: a sweep looks at no further session, and the failure of
   * the one under way (its statement cancelled, its pool closed) is not warned about.
   */
  signal?: AbortSignal;
};

export type SweepResult = { resumed: number; parked: number; abandoned: number; requeued: number };
