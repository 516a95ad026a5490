/**
 * One run of a session, from its start to its end, inside a job that holds the session's
 * lease and claim (session-job.ts): the run's start (or a resume's plan), the agent loop,
 * and the statement that ends it — parking the session, or asking for a resume, as its
 * outcome says (run-outcome.ts).
 */
import type { Logger } from "pino";
import { parseAgentConfig } from "../shared/agent-config.js";
import type { RunRow } from "../shared/db/schema.js";
import { ValidationError } from "../shared/errors.js";
import type { SessionEventInput } from "../shared/events.js";
import type { StoredMessage } from "../shared/messages.js";
import { scrubSecrets, secretValuesFromEnv } from "../shared/scrub-secrets.js";
import type { SessionEventLog } from "../shared/session-event-log.js";
import type { Fence, FencedWrites, HistoryCursor } from "../shared/store/fenced-writes.js";
import { lastStepSeq } from "../shared/store/rows.js";
import { tailState } from "../shared/tail-state.js";
import { runAgentLoop } from "./agent-loop.js";
import { CapacityWait } from "./endpoint-gate.js";
import { ERROR_OUTCOMES, RunError } from "./extensions.js";
import {
  CONTINUE,
  committedUsage,
  finalUsage,
  forgetWaiting,
  handBack,
  ledgerOf,
  previousPart,
  turnsTaken,
  withCapacityGate,
} from "./hand-back.js";
import type { SessionJobDeps } from "./job-deps.js";
import { withProviderErrorLog } from "./models/logged-provider.js";
import { loopObserver, runContext, runStartedEvent, toolFinishedEvent, withDeltas } from "./run-events.js";
import {
  NEEDS_SWEEPER,
  PARK_AT_ONCE,
  primaryRejected,
  type RunOutcome,
  rejectedForGood,
  storageRejection,
} from "./run-outcome.js";
import { planRunStart } from "./start-run.js";
import { toolLabel } from "./tools/registry.js";

/**
 * Asks for an automatic resume (counted against the session's one limit, with backoff) and
 * queues its job; returns the run when it may start now, so this worker goes on with it.
 */
export async function requestResume(
  sessionId: string,
  deps: SessionJobDeps,
  hint: { primaryRejected?: boolean } = {},
): Promise<RunRow | null> {
  const scheduled = await deps.resumes.schedule({ sessionId, trigger: "worker", ...hint });
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

/** What a run that starts with only the user message leaves as the session's tail. */
export const FIRST_RUN_TAIL = tailState([{ role: "user", content: "" }]);

export type SessionState = {
  fence: Fence;
  history: StoredMessage[];
  agent: unknown;
  /** The stored agent, validated once per job (null until the first run needs it). */
  parsedAgent: ReturnType<typeof parseAgentConfig> | null;
  /** What the session has used of its budget so far (kept current by the agent loop). */
  budget: { tokensUsed: number };
  /** The session's events (null when events are off). */
  events: SessionEventLog | null;
  /** Which run of this job committed each message (for MESSAGE events). */
  runBySeq: Map<number, string>;
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

/**
 * Ends a run that appends nothing: a resume with nothing to resume, or a run whose first
 * messages Postgres refused. Returns the session's next queued run.
 */
async function endUnstarted(
  run: RunRow,
  state: SessionState,
  signal: AbortSignal,
  deps: SessionJobDeps,
  end: { outcome: RunOutcome; reason: string; error: string; park?: { reason: RunOutcome; detail: string } },
): Promise<RunRow | null> {
  const { fence, history, events } = state;
  const kind = run.kind === "resume" ? "resume" : "run";
  const logFields = runLogFields(run, kind, deps);
  const startedAt = Date.now();
  const { outcome, error } = end;
  await deps.writes.startRun(
    fence,
    cursorOf(history),
    { id: run.id, workerId: deps.workerId, resumeKind: null },
    [],
    tailState(history),
  );
  deps.metrics.runs.inc({ kind, outcome });
  deps.log.info({ ...logFields, trigger: run.trigger, resumeKind: null }, "run started");
  await events?.emitBounded([runStartedEvent(run, kind, null)]);
  const nextRun = await deps.writes.endRun(fence, run.id, outcome, {
    error,
    ...(end.park ? { park: end.park } : {}),
  });
  const ended: SessionEventInput[] = [{ type: "RUN_COMPLETED", runId: run.id, outcome }];
  if (end.park && nextRun === null) {
    deps.metrics.sessionsParked.inc({ reason: end.park.reason });
    deps.log.warn({ sessionId: fence.sessionId, runId: run.id, ...end.park }, "session parked");
    ended.push({ type: "SESSION_PARKED", reason: end.park.reason });
  }
  await events?.emitBounded(ended);
  deps.log.info(
    {
      ...logFields,
      outcome,
      durationMs: Date.now() - startedAt,
      error: scrubSecrets(error, secretValuesFromEnv(process.env)),
    },
    "run ended",
  );
  if (deps.extensions && !deps.extensions.empty) {
    // A resume that finds nothing to resume fails like any failed request (resume-semantics §2).
    const ctx = await runContext(run, kind, null, history, state.agent, signal, deps);
    await deps.extensions.afterRun(ctx, { outcome, error });
    if (ERROR_OUTCOMES.has(outcome))
      await deps.extensions.onError(ctx, new RunError(error, outcome, end.reason));
  }
  return nextRun;
}

/** Runs one queued run to its end; returns the session's next queued run. */
export async function processRun(
  run: RunRow,
  state: SessionState,
  signal: AbortSignal,
  deps: SessionJobDeps,
  /** What the claim appended when it already started this run (claimSession's `startFirst`). */
  startedByClaim: StoredMessage[] | null = null,
): Promise<RunRow | null> {
  const { fence, history, agent: storedAgent, budget, events, runBySeq } = state;
  const kind = run.kind === "resume" ? "resume" : "run";
  const logFields = runLogFields(run, kind, deps);
  const startedAt = Date.now();
  // A run handed back while it waited for capacity (contracts §15) goes on where it stopped.
  const previous = startedByClaim ? null : previousPart(run, deps.capacity);
  const ledger = ledgerOf(previous);
  let reservesModelCalls = false;
  // A run the claim started appended exactly what planRunStart gives an empty history.
  const plan = previous ? CONTINUE : planRunStart(run, history);
  if (plan.action === "refuse") {
    if (kind === "resume") deps.metrics.resumeRefusals.inc({ reason: plan.reason });
    const error = plan.detail ? `${plan.reason}: ${plan.detail}` : plan.reason;
    return endUnstarted(run, state, signal, deps, { outcome: plan.outcome, reason: plan.reason, error });
  }
  let started: StoredMessage[] | null;
  try {
    started =
      startedByClaim ??
      (await deps.writes.startRun(
        fence,
        cursorOf(history),
        { id: run.id, workerId: deps.workerId, resumeKind: previous ? run.resumeKind : plan.resumeKind },
        plan.appends,
        tailState([...history, ...plan.appends]),
      ));
  } catch (error) {
    // What the run starts with (a resume's results for the interrupted calls, say) refused by
    // Postgres for its content: it would be refused on every retry, so the run ends
    // `storage_rejected` with nothing appended and the session is parked (contracts §12).
    const outcome = storageRejection(error);
    if (!outcome) throw error;
    const detail = (error as Error).message;
    return endUnstarted(run, state, signal, deps, {
      outcome,
      reason: outcome,
      error: detail,
      park: { reason: outcome, detail },
    });
  }
  if (started === null) return (await deps.queries.nextQueuedRun(fence.sessionId)) ?? null;
  deps.log.info({ ...logFields, trigger: run.trigger, resumeKind: plan.resumeKind ?? null }, "run started");
  const before = history.slice();
  const lastSeqBefore = history.at(-1)?.seq ?? 0;
  for (const message of started) runBySeq.set(message.seq, run.id);
  history.push(...started);
  // RUN_STARTED after every earlier message, before the messages the run started with (in
  // the same write as those, emitted below: the log sends what is asked for in one turn together).
  if (!previous) void events?.emit([runStartedEvent(run, kind, plan.resumeKind ?? null)], lastSeqBefore);
  if (plan.resumeKind) deps.metrics.resumes.inc({ kind: plan.resumeKind, trigger: run.trigger });
  if (run.lastSignAt && !previous)
    deps.metrics.crashToResume.observe(Math.max(0, Date.now() - run.lastSignAt.getTime()) / 1000);
  for (const tool of plan.interruptedCalls)
    deps.metrics.toolCalls.inc({ tool: toolLabel(deps.tools, tool), outcome: "interrupted" });

  const extensions = deps.extensions && !deps.extensions.empty ? deps.extensions : null;
  const ctx = extensions
    ? await runContext(run, kind, plan.resumeKind ?? null, before, storedAgent, signal, deps)
    : null;
  const hookFailure = ctx && !previous ? await extensions!.beforeRun(ctx) : null;
  if (ctx && !hookFailure && kind === "run" && run.input !== null && !previous)
    await extensions!.onMessage(ctx, run.input);
  if (ctx)
    for (const message of started)
      await extensions!.onCommitted(ctx, { runId: run.id, seq: message.seq, message });
  // The results the run starts with (a resume's answers to interrupted calls, calls closed
  // before new input) are committed results too: each gets its TOOL_FINISHED (contracts §7).
  for (const message of started)
    if (message.role === "tool") void events?.emit([toolFinishedEvent(run.id, message)], message.seq);
  void events?.emit();
  const observer = loopObserver(run.id, events, runBySeq, ctx, extensions);

  let result: Awaited<ReturnType<typeof runAgentLoop>>;
  try {
    if (hookFailure) {
      // A beforeRun that throws ends the run failed, and nothing is sent to the model (contracts §8).
      result = { outcome: "failed", error: hookFailure, usage: { inputTokens: 0, outputTokens: 0 } };
    } else {
      state.parsedAgent ??= parseAgentConfig(storedAgent);
      const parsed = state.parsedAgent;
      // A handed-back run has made some of its model calls already (maxTurns is per run).
      const agent = previous ? { ...parsed, maxTurns: parsed.maxTurns - turnsTaken(previous) } : parsed;
      reservesModelCalls = agent.budget?.maxModelCalls !== undefined;
      const model = withCapacityGate(
        withDeltas(
          withProviderErrorLog(
            run.model ? deps.models(run.model, "run.model") : deps.models(agent.model, "agent.model"),
            deps.log,
            { runId: run.id, workerId: logFields.workerId },
          ),
          events,
          run.id,
        ),
        run.model ?? agent.model,
        run,
        ledger,
        deps.capacity,
      );
      result = await runAgentLoop(
        {
          fence,
          runId: run.id,
          agent,
          model,
          history,
          signal,
          budget,
          observer,
          // Goal mode belongs to the request that asked for it: never to a resume (contracts §8).
          goal: kind === "run" ? (run.goal ?? null) : null,
          // The last step is stored with the run's end, in one statement, when no hook must see it first.
          deferLast: !ctx && deps.writes.appendAndEndRun !== undefined,
        },
        deps,
      );
    }
  } catch (error) {
    // Waiting for capacity is not failing (contracts §15): the run is handed back, unended.
    // A run whose session was cancelled meanwhile ends `cancelled` instead.
    const committed = history.slice(before.length);
    const handed =
      error instanceof CapacityWait && deps.capacity
        ? await handBack(
            error,
            { fence, run, committed, previous, ledger, reservedModelCall: reservesModelCalls },
            deps.capacity,
          )
        : null;
    if (handed === "cancelled") result = { outcome: "cancelled", usage: committedUsage(committed).usage };
    else {
      // Infrastructure faults (Postgres, Redis) propagate: the job is retried, and what
      // follows is an automatic resume counted against the session's limit. A configuration
      // problem (an invalid stored agent) and a write Postgres refuses for its content would
      // fail the same way every time: they end the run and park the session at once.
      const outcome = error instanceof ValidationError ? "invalid_agent" : storageRejection(error);
      if (!outcome) {
        await forgetWaiting(ledger, run, deps.capacity);
        throw error;
      }
      result = { outcome, error: (error as Error).message, usage: { inputTokens: 0, outputTokens: 0 } };
    }
  }
  // However the run ended, a request of its that was refused waits no more: its tenant stops
  // counting it at once (a run aborted while it asked, or cancelled as it was handed back).
  await forgetWaiting(ledger, run, deps.capacity);
  result = { ...result, usage: finalUsage(result.usage, previous, ledger) };
  let park: { reason: RunOutcome | "provider_rejected"; detail?: string } | undefined = PARK_AT_ONCE.has(
    result.outcome,
  )
    ? { reason: result.outcome, detail: result.error }
    : rejectedForGood(result, run, state.parsedAgent)
      ? { reason: "provider_rejected", detail: result.error }
      : undefined;
  const endDetail = { error: result.error ?? null, usage: result.usage, park };
  let next: RunRow | null;
  const last = result.last;
  if (last && deps.writes.appendAndEndRun) {
    let ended: Awaited<ReturnType<FencedWrites["appendAndEndRun"]>> | null = null;
    try {
      ended = await deps.writes.appendAndEndRun(
        fence,
        cursorOf(history),
        run.id,
        last,
        result.outcome,
        endDetail,
      );
    } catch (error) {
      // Output Postgres refuses for its content ends the run like a refused append would.
      const refused = storageRejection(error);
      if (!refused) throw error;
      result = { outcome: refused, error: (error as Error).message, usage: result.usage };
    }
    if (ended) {
      const [stored] = ended.stored;
      history.push(stored!);
      await observer.committed(stored!);
      next = ended.next;
    } else {
      park = { reason: result.outcome, detail: result.error };
      next = await deps.writes.endRun(fence, run.id, result.outcome, {
        ...endDetail,
        error: result.error ?? null,
        park,
      });
    }
  } else {
    next = await deps.writes.endRun(fence, run.id, result.outcome, endDetail);
  }
  deps.metrics.runs.inc({ kind, outcome: result.outcome });
  const ended: SessionEventInput[] = [{ type: "RUN_COMPLETED", runId: run.id, outcome: result.outcome }];
  if (park && next === null) {
    deps.metrics.sessionsParked.inc({ reason: park.reason });
    deps.log.warn(
      { sessionId: fence.sessionId, runId: run.id, reason: park.reason, detail: park.detail },
      "session parked",
    );
    ended.push({ type: "SESSION_PARKED", reason: park.reason });
  }
  await events?.emitBounded(ended);
  if (ctx) {
    await extensions!.afterRun(ctx, {
      outcome: result.outcome,
      ...(result.error ? { error: result.error } : {}),
    });
    if (ERROR_OUTCOMES.has(result.outcome))
      await extensions!.onError(ctx, new RunError(result.error ?? result.outcome, result.outcome));
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
  if (next === null && !park && primaryRejected(result, run, state.parsedAgent)) {
    // Retrying a model its provider refuses for good is wasted: this worker asks for the
    // resume on the first fallback model itself, and goes on with it when it may start now.
    next = await requestResume(fence.sessionId, deps, { primaryRejected: true });
  } else if (NEEDS_SWEEPER.has(result.outcome)) {
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
