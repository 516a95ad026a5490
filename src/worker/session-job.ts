/**
 * One job: take the session's lease, claim the session (bump its fencing epoch, end runs an
 * earlier holder left behind), then take its queued runs one after the other, oldest first.
 * A second job for a busy session answers "busy" and waits its turn.
 */
import type { Logger } from "pino";
import { type ModelConfig, parseAgentConfig } from "../shared/agent-config.js";
import type { RunRow } from "../shared/db/schema.js";
import { FencedError, ValidationError } from "../shared/errors.js";
import type { LeaseStore } from "../shared/lease.js";
import type { StoredMessage } from "../shared/messages.js";
import type { FleetMetrics } from "../shared/metrics.js";
import { scrubSecrets, secretValuesFromEnv } from "../shared/scrub-secrets.js";
import type { AutomaticResumes } from "../shared/store/automatic-resumes.js";
import type { Fence, FencedWrites, HistoryCursor } from "../shared/store/fenced-writes.js";
import { lastStepSeq } from "../shared/store/rows.js";
import type { SessionQueries } from "../shared/store/session-queries.js";
import { tailState } from "../shared/tail-state.js";
import { type AgentLoopDeps, runAgentLoop } from "./agent-loop.js";
import { guardedWrites, LeaseGuard } from "./lease-guard.js";
import { withProviderErrorLog } from "./models/logged-provider.js";
import type { ModelProvider } from "./models/provider.js";
import type { RunOutcome } from "./run-outcome.js";
import { planRunStart } from "./start-run.js";
import { toolLabel } from "./tools/registry.js";

export type SessionJobDeps = AgentLoopDeps & {
  workerId: string;
  queries: Pick<SessionQueries, "nextQueuedRun">;
  writes: Pick<FencedWrites, "append" | "claimSession" | "startRun" | "endRun" | "reserveModelCall">;
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
  >;
  /** Every automatic resume a worker asks for is decided and counted there. */
  resumes: Pick<AutomaticResumes, "schedule">;
  /** Tells the sweepers that a run stopped short, so they need not wait for their next poll. */
  reportStop: (sessionId: string, outcome: RunOutcome) => Promise<void>;
  /** Queues a run's job (used when this worker itself asks for a resume), after `delayMs`. */
  enqueue: (run: RunRow, delayMs: number) => Promise<void>;
  log: Pick<Logger, "info" | "warn" | "error" | "debug">;
};

export type JobResult = "done" | "busy" | "fenced";

/**
 * Outcomes that park the session in the statement that ends the run (contracts §12): a
 * limit was reached or the run can never succeed as configured; an automatic resume would
 * only repeat it. An explicit resume or a new message continues the session.
 */
const PARK_AT_ONCE: ReadonlySet<RunOutcome> = new Set<RunOutcome>([
  "max_turns",
  "budget_exhausted",
  "invalid_agent",
  "storage_rejected",
]);

/**
 * A write Postgres refused for what it held rather than for being unreachable — SQLSTATE
 * class 22 (data exception), 23 (a constraint, e.g. a second result for one call id) or 54
 * (a limit, e.g. a value too large): retrying would fail the same way every time.
 */
export function storageRejection(error: unknown): "storage_rejected" | null {
  const code = (error as { code?: unknown } | null)?.code;
  return typeof code === "string" && /^(22|23|54)/.test(code) ? "storage_rejected" : null;
}

/** Outcomes after which the session still needs a resume (or parking) by a sweeper. */
const NEEDS_SWEEPER: ReadonlySet<RunOutcome> = new Set<RunOutcome>([
  "interrupted",
  "max_output",
  "paused",
  "provider_error",
  "refused",
  "context_full",
  "unknown_stop",
  "failed",
]);

export async function processSessionJob(
  sessionId: string,
  signal: AbortSignal,
  deps: SessionJobDeps,
): Promise<JobResult> {
  // The guard is fed with the monotonic time each request was sent (lease-guard.ts), and
  // checked before every write and every tool start of this job.
  const guard = new LeaseGuard(sessionId, deps.leaseTtlMs);
  const acquireSentAt = guard.stamp();
  const token = await deps.lease.acquire(sessionId, deps.workerId);
  if (!token) return "busy";
  guard.confirmed(acquireSentAt);
  const jobDeps: SessionJobDeps = { ...deps, writes: guardedWrites(deps.writes, guard), leaseGuard: guard };
  const controller = new AbortController();
  const onOuterAbort = () => controller.abort(signal.reason);
  signal.addEventListener("abort", onOuterAbort, { once: true });
  const renew = setInterval(
    () => {
      const sentAt = guard.stamp();
      deps.lease.renew(sessionId, token).then(
        (ok) => {
          if (ok) {
            guard.confirmed(sentAt);
          } else {
            guard.lost();
            controller.abort(new Error("session lease lost"));
          }
        },
        // The guard lapses on its own if no renewal succeeds within the TTL.
        (error) => deps.log.warn({ err: error, sessionId }, "lease renewal failed; retrying"),
      );
    },
    Math.max(100, Math.floor(deps.leaseTtlMs / 3)),
  );
  try {
    const claim = await jobDeps.writes.claimSession(sessionId, deps.workerId);
    if (claim === null) return "done";
    const fence: Fence = { sessionId, epoch: claim.epoch };
    for (const _ of claim.staleRunIds) deps.metrics.runs.inc({ kind: "run", outcome: "crashed" });
    let next = claim.next;
    if (claim.staleRunIds.length > 0 && !next) {
      // The previous holder crashed, froze, or this job is the queue's retry of a job that
      // failed: the resume that follows is an automatic one, counted like the sweeper's.
      next = await requestResume(sessionId, deps);
    }
    if (!next) return "done";
    // Read once, with the claim: while this worker holds the lease, only it appends, so the
    // in-memory history stays exactly the stored one from run to run.
    const state: SessionState = {
      fence,
      history: claim.history,
      agent: claim.agent,
      budget: { tokensUsed: claim.tokensUsed },
    };
    while (next && !controller.signal.aborted) {
      next = await processRun(next, state, controller.signal, jobDeps);
    }
    return "done";
  } catch (error) {
    if (error instanceof FencedError) {
      deps.metrics.fencedWrites.inc();
      deps.log.warn({ sessionId, reason: error.message }, "fenced out: this worker lost the lease; stopping");
      return "fenced";
    }
    throw error;
  } finally {
    clearInterval(renew);
    signal.removeEventListener("abort", onOuterAbort);
    await deps.lease.release(sessionId, token).catch(() => {});
  }
}

/**
 * Asks for an automatic resume (counted against the session's one limit, with backoff) and
 * queues its job; returns the run when it may start now, so this worker goes on with it.
 */
async function requestResume(sessionId: string, deps: SessionJobDeps): Promise<RunRow | null> {
  const scheduled = await deps.resumes.schedule({ sessionId, trigger: "worker" });
  switch (scheduled.action) {
    case "none":
      return null;
    case "park":
      deps.log.warn({ sessionId, reason: scheduled.reason, detail: scheduled.detail }, "session parked");
      return null;
    case "resume": {
      await deps.enqueue(scheduled.run, scheduled.delayMs);
      return scheduled.delayMs === 0 ? scheduled.run : null;
    }
  }
}

type SessionState = {
  fence: Fence;
  history: StoredMessage[];
  agent: unknown;
  /** What the session has used of its budget so far (kept current by the agent loop). */
  budget: { tokensUsed: number };
};

/**
 * The fields of a run's "run started" / "run ended" info lines: `sessionId`, `runId`,
 * `workerId`, `kind` (`run`, `resume`). `workerId` is left out when the logger already binds
 * it (the worker's does), so that no line carries the key twice.
 */
function runLogFields(run: RunRow, kind: "run" | "resume", deps: SessionJobDeps) {
  const bindings = (deps.log as Partial<Pick<Logger, "bindings">>).bindings?.() as
    | { workerId?: unknown }
    | undefined;
  return {
    sessionId: run.sessionId,
    runId: run.id,
    ...(bindings?.workerId === deps.workerId ? {} : { workerId: deps.workerId }),
    kind,
  };
}

/** Runs one queued run to its end; returns the session's next queued run. */
async function processRun(
  run: RunRow,
  { fence, history, agent: storedAgent, budget }: SessionState,
  signal: AbortSignal,
  deps: SessionJobDeps,
): Promise<RunRow | null> {
  const kind = run.kind === "resume" ? "resume" : "run";
  const logFields = runLogFields(run, kind, deps);
  const startedAt = Date.now();
  const plan = planRunStart(run, history);
  if (plan.action === "refuse") {
    await deps.writes.startRun(
      fence,
      cursorOf(history),
      { id: run.id, workerId: deps.workerId, resumeKind: null },
      [],
      tailState(history),
    );
    if (kind === "resume") deps.metrics.resumeRefusals.inc({ reason: plan.reason });
    deps.metrics.runs.inc({ kind, outcome: plan.outcome });
    const error = plan.detail ? `${plan.reason}: ${plan.detail}` : plan.reason;
    deps.log.info({ ...logFields, trigger: run.trigger, resumeKind: null }, "run started");
    const nextRun = await deps.writes.endRun(fence, run.id, plan.outcome, { error });
    deps.log.info(
      { ...logFields, outcome: plan.outcome, durationMs: Date.now() - startedAt, error },
      "run ended",
    );
    return nextRun;
  }
  const started = await deps.writes.startRun(
    fence,
    cursorOf(history),
    { id: run.id, workerId: deps.workerId, resumeKind: plan.resumeKind },
    plan.appends,
    tailState([...history, ...plan.appends]),
  );
  if (started === null) return (await deps.queries.nextQueuedRun(fence.sessionId)) ?? null;
  deps.log.info({ ...logFields, trigger: run.trigger, resumeKind: plan.resumeKind ?? null }, "run started");
  history.push(...started);
  if (plan.resumeKind) deps.metrics.resumes.inc({ kind: plan.resumeKind, trigger: run.trigger });
  if (run.lastSignAt)
    deps.metrics.crashToResume.observe(Math.max(0, Date.now() - run.lastSignAt.getTime()) / 1000);
  for (const tool of plan.interruptedCalls)
    deps.metrics.toolCalls.inc({ tool: toolLabel(deps.tools, tool), outcome: "interrupted" });

  let result: Awaited<ReturnType<typeof runAgentLoop>>;
  try {
    const agent = parseAgentConfig(storedAgent);
    const model = withProviderErrorLog(
      run.model ? deps.models(run.model, "run.model") : deps.models(agent.model, "agent.model"),
      deps.log,
      { runId: run.id, workerId: logFields.workerId },
    );
    result = await runAgentLoop({ fence, runId: run.id, agent, model, history, signal, budget }, deps);
  } catch (error) {
    // Infrastructure faults (Postgres, Redis) propagate: the job is retried, and what
    // follows is an automatic resume counted against the session's limit. A configuration
    // problem (an invalid stored agent) and a write Postgres refuses for its content would
    // fail the same way every time: they end the run and park the session at once.
    const outcome = error instanceof ValidationError ? "invalid_agent" : storageRejection(error);
    if (!outcome) throw error;
    result = { outcome, error: (error as Error).message, usage: { inputTokens: 0, outputTokens: 0 } };
  }
  const park = PARK_AT_ONCE.has(result.outcome)
    ? { reason: result.outcome, detail: result.error }
    : undefined;
  const next = await deps.writes.endRun(fence, run.id, result.outcome, {
    error: result.error ?? null,
    usage: result.usage,
    park,
  });
  deps.metrics.runs.inc({ kind, outcome: result.outcome });
  if (park && next === null) {
    deps.metrics.sessionsParked.inc({ reason: park.reason });
    deps.log.warn({ sessionId: fence.sessionId, reason: park.reason, detail: park.detail }, "session parked");
  }
  deps.log.info(
    {
      ...logFields,
      outcome: result.outcome,
      durationMs: Date.now() - startedAt,
      ...(result.error ? { error: scrubSecrets(result.error, secretValuesFromEnv(process.env)) } : {}),
    },
    "run ended",
  );
  if (NEEDS_SWEEPER.has(result.outcome)) {
    await deps.reportStop(fence.sessionId, result.outcome).catch(() => {});
  }
  if (result.outcome === "cancelled") {
    // This worker is stopping: hand the session to another worker right away.
    await requestResume(fence.sessionId, deps);
  }
  return next;
}

function cursorOf(history: readonly StoredMessage[]): HistoryCursor {
  return { lastSeq: history.at(-1)?.seq ?? 0, lastStepSeq: lastStepSeq(history) };
}
