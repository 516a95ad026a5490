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
import type { Fence, FencedWrites, HistoryCursor } from "../shared/store/fenced-writes.js";
import { lastStepSeq } from "../shared/store/rows.js";
import type { NewRun, SessionQueries } from "../shared/store/session-queries.js";
import { tailState } from "../shared/tail-state.js";
import { type AgentLoopDeps, runAgentLoop } from "./agent-loop.js";
import type { ModelProvider } from "./models/provider.js";
import type { RunOutcome } from "./run-outcome.js";
import { planRunStart } from "./start-run.js";

export type SessionJobDeps = AgentLoopDeps & {
  workerId: string;
  queries: Pick<SessionQueries, "nextQueuedRun" | "createRun">;
  writes: Pick<FencedWrites, "append" | "claimSession" | "startRun" | "endRun">;
  lease: LeaseStore;
  leaseTtlMs: number;
  models: (config: ModelConfig) => ModelProvider;
  metrics: Pick<
    FleetMetrics,
    "modelStops" | "toolCalls" | "runs" | "resumes" | "resumeRefusals" | "fencedWrites" | "crashToResume"
  >;
  /** Tells the sweepers that a run stopped short, so they need not wait for their next poll. */
  reportStop: (sessionId: string, outcome: RunOutcome) => Promise<void>;
  /** Queues a run's job (used when this worker itself asks for a resume). */
  enqueue: (run: RunRow) => Promise<void>;
  log: Pick<Logger, "info" | "warn" | "error" | "debug">;
};

export type JobResult = "done" | "busy" | "fenced";

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
  const token = await deps.lease.acquire(sessionId, deps.workerId);
  if (!token) return "busy";
  const controller = new AbortController();
  const onOuterAbort = () => controller.abort(signal.reason);
  signal.addEventListener("abort", onOuterAbort, { once: true });
  const renew = setInterval(
    () => {
      deps.lease.renew(sessionId, token).then(
        (ok) => {
          if (!ok) controller.abort(new Error("session lease lost"));
        },
        (error) => deps.log.warn({ err: error, sessionId }, "lease renewal failed; retrying"),
      );
    },
    Math.max(100, Math.floor(deps.leaseTtlMs / 3)),
  );
  try {
    const claim = await deps.writes.claimSession(sessionId, deps.workerId);
    if (claim === null) return "done";
    const fence: Fence = { sessionId, epoch: claim.epoch };
    for (const _ of claim.staleRunIds) deps.metrics.runs.inc({ kind: "run", outcome: "crashed" });
    let next = claim.next;
    if (claim.staleRunIds.length > 0) {
      const resume = await requestResume(sessionId, "worker", deps);
      next ??= resume;
    }
    if (!next) return "done";
    // Read once, with the claim: while this worker holds the lease, only it appends, so the
    // in-memory history stays exactly the stored one from run to run.
    const history = claim.history;
    while (next && !controller.signal.aborted) {
      next = await processRun(next, { fence, history, agent: claim.agent }, controller.signal, deps);
    }
    return "done";
  } catch (error) {
    if (error instanceof FencedError) {
      deps.metrics.fencedWrites.inc();
      deps.log.warn({ sessionId }, "fenced out: another worker holds this session now; stopping");
      return "fenced";
    }
    throw error;
  } finally {
    clearInterval(renew);
    signal.removeEventListener("abort", onOuterAbort);
    await deps.lease.release(sessionId, token).catch(() => {});
  }
}

/** Queues a resume (joined with one already waiting) and its job. */
async function requestResume(
  sessionId: string,
  trigger: NewRun["trigger"],
  deps: SessionJobDeps,
): Promise<RunRow> {
  const { run } = await deps.queries.createRun({ sessionId, kind: "resume", trigger });
  await deps.enqueue(run);
  return run;
}

type SessionState = { fence: Fence; history: StoredMessage[]; agent: unknown };

/** Runs one queued run to its end; returns the session's next queued run. */
async function processRun(
  run: RunRow,
  { fence, history, agent: storedAgent }: SessionState,
  signal: AbortSignal,
  deps: SessionJobDeps,
): Promise<RunRow | null> {
  const kind = run.kind === "resume" ? "resume" : "run";
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
    return deps.writes.endRun(fence, run.id, plan.outcome, {
      error: plan.detail ? `${plan.reason}: ${plan.detail}` : plan.reason,
    });
  }
  const started = await deps.writes.startRun(
    fence,
    cursorOf(history),
    { id: run.id, workerId: deps.workerId, resumeKind: plan.resumeKind },
    plan.appends,
    tailState([...history, ...plan.appends]),
  );
  if (started === null) return (await deps.queries.nextQueuedRun(fence.sessionId)) ?? null;
  history.push(...started);
  if (plan.resumeKind) deps.metrics.resumes.inc({ kind: plan.resumeKind, trigger: run.trigger });
  if (run.lastSignAt)
    deps.metrics.crashToResume.observe(Math.max(0, Date.now() - run.lastSignAt.getTime()) / 1000);
  for (const tool of plan.interruptedCalls) deps.metrics.toolCalls.inc({ tool, outcome: "interrupted" });

  let result: Awaited<ReturnType<typeof runAgentLoop>>;
  try {
    const agent = parseAgentConfig(storedAgent);
    const model = deps.models(run.model ?? agent.model);
    result = await runAgentLoop({ fence, runId: run.id, agent, model, history, signal }, deps);
  } catch (error) {
    // Infrastructure faults (Postgres, Redis) propagate: the job is retried and the run
    // resumed. Only a configuration problem (an invalid stored agent, an unknown tool)
    // ends the run here.
    if (!(error instanceof ValidationError)) throw error;
    deps.metrics.runs.inc({ kind, outcome: "failed" });
    return deps.writes.endRun(fence, run.id, "failed", { error: error.message });
  }
  const next = await deps.writes.endRun(fence, run.id, result.outcome, {
    error: result.error ?? null,
    usage: result.usage,
  });
  deps.metrics.runs.inc({ kind, outcome: result.outcome });
  deps.log.debug({ sessionId: fence.sessionId, runId: run.id, outcome: result.outcome }, "run ended");
  if (NEEDS_SWEEPER.has(result.outcome)) {
    await deps.reportStop(fence.sessionId, result.outcome).catch(() => {});
  }
  if (result.outcome === "cancelled") {
    // This worker is stopping: hand the session to another worker right away.
    await requestResume(fence.sessionId, "worker", deps);
  }
  return next;
}

function cursorOf(history: readonly StoredMessage[]): HistoryCursor {
  return { lastSeq: history.at(-1)?.seq ?? 0, lastStepSeq: lastStepSeq(history) };
}
