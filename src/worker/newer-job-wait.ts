/**
 * A job whose name this worker does not know (a rolling deploy: a newer API or sweeper added
 * a kind of job this older worker was not built for). Failing it for good left its run queued
 * until a sweeper found the job failed and queued it again, a retry counted against the
 * session. So it is handed back as a run with a newer agent is (newer-agent-wait.ts): its job
 * delayed a tenth of FLEET_NEWER_AGENT_WAIT_MS (1 s to 30 s) so that a newer worker takes it,
 * one warning per job name in this process. Once a worker first handed it back that long ago
 * (kept in the job's own hash, on Redis's clock, so every worker counts from the same moment),
 * the run its data names ends `invalid_agent` and its session is parked naming the job
 * (unknown-job-runs.ts); a job that names no queued run is failed for good with that reason.
 */
import type { Job } from "bullmq";
import type { Redis } from "ioredis";
import type { Logger } from "pino";
import { bullmq } from "../shared/cjs-packages.js";
import type { EventWriter } from "../shared/event-writer.js";
import type { FleetMetrics } from "../shared/metrics.js";
import { runJobSchema } from "../shared/queues.js";
import type { UnknownJobEnd } from "../shared/store/unknown-job-runs.js";
import { newerAgentDelayMs } from "./newer-agent-wait.js";

/** The field of a job's hash that keeps when a worker first handed it back (epoch ms). */
const SINCE_FIELD = "fleetUnknownNameSince";

// KEYS: [1] the job's hash. Returns { since, now } on Redis's clock (epoch ms), since set to
// now the first time; { -1, now } when the job is gone.
const SINCE_SCRIPT = `
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
if redis.call('EXISTS', KEYS[1]) == 0 then return { -1, now } end
redis.call('HSETNX', KEYS[1], '${SINCE_FIELD}', now)
return { tonumber(redis.call('HGET', KEYS[1], '${SINCE_FIELD}')), now }`;

/** What to do with a job of an unknown name (pure). */
export type UnknownJobStep = { action: "hand_back"; delayMs: number } | { action: "end"; detail: string };

/** Hands the job back while less than `waitMs` passed since it first was; then ends it, saying why (pure). */
export function unknownJobStep(name: string, waitedMs: number, waitMs: number): UnknownJobStep {
  if (waitedMs < waitMs) return { action: "hand_back", delayMs: newerAgentDelayMs(waitMs) };
  const waited =
    waitedMs >= 60_000 ? `${Math.round(waitedMs / 60_000)} min` : `${Math.round(waitedMs / 1000)} s`;
  return {
    action: "end",
    detail: `job "${name}" is of a kind this worker does not know (no worker of this fleet took it for ${waited}, FLEET_NEWER_AGENT_WAIT_MS: added by a newer release that no longer runs?)`,
  };
}

export type UnknownJobDeps = {
  /** FLEET_NEWER_AGENT_WAIT_MS (0: the job ends at once). */
  waitMs: number;
  redis: Pick<Redis, "eval">;
  prefix: string;
  /** Puts the job back into the delayed set until `until` (put-back.ts). */
  putBack: (job: Job, until: number, token: string | undefined) => Promise<void>;
  /** Ends the run the job names and parks its session (unknown-job-runs.ts). */
  endRun: (target: { sessionId: string; runId: string }, detail: string) => Promise<UnknownJobEnd>;
  events: Pick<EventWriter, "writeAfterSync"> | null;
  database: Parameters<EventWriter["writeAfterSync"]>[0];
  metrics: Pick<FleetMetrics, "runs" | "sessionsParked">;
  log: Pick<Logger, "warn">;
};

/** Job names this process has warned about: one line each (bounded: a flood starts it over). */
const MAX_NAMES_WARNED = 1_000;

export class UnknownJobs {
  private readonly warned = new Set<string>();

  constructor(private readonly deps: UnknownJobDeps) {}

  /** Hands the job back (throws BullMQ's DelayedError), or ends it: returns, or throws UnrecoverableError. */
  async handle(job: Job, token: string | undefined): Promise<"done"> {
    const { deps } = this;
    const key = `${deps.prefix}:${job.queueName}:${job.id}`;
    const [since, now] = (await deps.redis.eval(SINCE_SCRIPT, 1, key)) as [number, number];
    const step = unknownJobStep(job.name, since < 0 ? 0 : now - since, deps.waitMs);
    if (step.action === "hand_back") {
      if (!this.warned.has(job.name)) {
        if (this.warned.size >= MAX_NAMES_WARNED) this.warned.clear();
        this.warned.add(job.name);
        deps.log.warn(
          { job: job.name, queue: job.queueName, jobId: job.id, delayMs: step.delayMs },
          `job "${job.name}" is of a kind this worker does not know (added by a newer release?): handed back for a newer worker`,
        );
      }
      await deps.putBack(job, now + step.delayMs, token);
      throw new bullmq.DelayedError();
    }
    const ids = runJobSchema.safeParse(job.data);
    const end = ids.success ? await deps.endRun(ids.data, step.detail) : { ended: false as const };
    if (!end.ended || !ids.success) throw new bullmq.UnrecoverableError(step.detail);
    const { sessionId, runId } = ids.data;
    deps.metrics.runs.inc({ kind: end.kind, outcome: "invalid_agent" });
    if (end.parked) deps.metrics.sessionsParked.inc({ reason: "invalid_agent" });
    deps.log.warn(
      { sessionId, runId, job: job.name, parked: end.parked, detail: step.detail },
      "run of a job this worker does not know ended",
    );
    await deps.events
      ?.writeAfterSync(deps.database, sessionId, [
        { type: "RUN_COMPLETED", runId, outcome: "invalid_agent" },
        ...(end.parked
          ? [{ type: "SESSION_PARKED" as const, reason: "invalid_agent", parkId: runId, runId }]
          : []),
      ])
      .catch(() => {});
    return "done";
  }
}
