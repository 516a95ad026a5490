/**
 * One run of a session, from its start to its end, inside a job that holds the session's
 * lease and claim (session-job.ts): the run's start (or a resume's plan) here, the agent loop
 * (run-loop.ts), and the statement that ends it — parking the session, or asking for a
 * resume, as its outcome says (end-run.ts, run-outcome.ts).
 */

import { crashToResumeSeconds } from "../shared/crash-clock.js";
import type { RunRow } from "../shared/db/schema.js";
import type { SessionEventInput } from "../shared/events.js";
import { tailStateAfter } from "../shared/history-tail.js";
import type { StoredMessage } from "../shared/messages.js";
import { scrubSecrets, secretValuesFromEnv } from "../shared/scrub-secrets.js";
import { tailState } from "../shared/tail-state.js";
import { withFields } from "../shared/with-fields.js";
import { finishRun } from "./end-run.js";
import { ERROR_OUTCOMES, RunError } from "./extensions.js";
import { CONTINUE, ledgerOf, previousPart } from "./hand-back.js";
import type { SessionJobDeps } from "./job-deps.js";
import { loopObserver, runContext, runStartedEvent, toolFinishedEvent } from "./run-events.js";
import { runLoop } from "./run-loop.js";
import {
  logStorageRejection,
  type RunOutcome,
  storageRejection,
  storageRejectionText,
} from "./run-outcome.js";
import { cursorOf, runLogFields, type SessionState, type StartedRun } from "./run-state.js";
import { planRunStart } from "./start-run.js";
import { toolLabel } from "./tools/registry.js";

/** What a run that starts with only the user message leaves as the session's tail. */
export const FIRST_RUN_TAIL = tailState([{ role: "user", content: "" }]);

/** Runs one queued run to its end; returns the session's next queued run. */
export async function processRun(
  run: RunRow,
  state: SessionState,
  signal: AbortSignal,
  deps: SessionJobDeps,
  /** What the claim appended when it already started this run (claimSession's `startFirst`). */
  startedByClaim: StoredMessage[] | null = null,
): Promise<RunRow | null> {
  const started = await startRun(run, state, signal, deps, startedByClaim);
  if ("next" in started) return started.next;
  try {
    return await finishRun(started, await runLoop(started));
  } finally {
    // The run's hook signal goes with the run (hook-runner.ts `hookSignal`).
    started.extensions?.releaseSignal(started.ctx?.signal);
  }
}

/**
 * Starts the run: plans it (a resume's appends, or a refusal), stores what it starts with,
 * emits RUN_STARTED and its first events, runs `beforeRun` and `onMessage`. Returns the
 * started run, or the session's next queued run when this one ended (or another worker
 * started it) without starting.
 */
async function startRun(
  run: RunRow,
  state: SessionState,
  signal: AbortSignal,
  deps: SessionJobDeps,
  startedByClaim: StoredMessage[] | null,
): Promise<StartedRun | { next: RunRow | null }> {
  const { fence, history, agent: storedAgent, events, runBySeq } = state;
  const kind = run.kind === "resume" ? "resume" : "run";
  const logFields = runLogFields(run, kind, deps);
  const startedAt = Date.now();
  // A run handed back while it waited for capacity (contracts §15) goes on where it stopped.
  const previous = startedByClaim ? null : previousPart(run, deps.capacity);
  const ledger = ledgerOf(previous);
  // A run the claim started appended exactly what planRunStart gives an empty history.
  const plan = previous ? CONTINUE : planRunStart(run, history);
  if (plan.action === "refuse") {
    if (kind === "resume") deps.metrics.resumeRefusals.inc({ reason: plan.reason });
    const error = plan.detail ? `${plan.reason}: ${plan.detail}` : plan.reason;
    return {
      next: await endUnstarted(run, state, signal, deps, {
        outcome: plan.outcome,
        reason: plan.reason,
        error,
      }),
    };
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
        tailStateAfter(history, plan.appends),
      ));
  } catch (error) {
    // What the run starts with (a resume's results for the interrupted calls, say) refused by
    // Postgres for its content: it would be refused on every retry, so the run ends
    // `storage_rejected` with nothing appended and the session is parked (contracts §12).
    const outcome = storageRejection(error);
    if (!outcome) throw error;
    logStorageRejection(deps.log, logFields, error);
    const detail = storageRejectionText(error);
    return {
      next: await endUnstarted(run, state, signal, deps, {
        outcome,
        reason: outcome,
        error: detail,
        park: { reason: outcome, detail },
      }),
    };
  }
  if (started === null) return { next: (await deps.queries.nextQueuedRun(fence.sessionId)) ?? null };
  deps.log.info(
    withFields(logFields, { trigger: run.trigger, resumeKind: plan.resumeKind ?? null }),
    "run started",
  );
  const before = history.slice();
  const lastSeqBefore = history.at(-1)?.seq ?? 0;
  for (const message of started) runBySeq.set(message.seq, run.id);
  history.push(...started);
  // RUN_STARTED after every earlier message, before the messages the run started with (in
  // the same write as those, emitted below: the log sends what is asked for in one turn together).
  if (!previous) void events?.emit([runStartedEvent(run, kind, plan.resumeKind ?? null)], lastSeqBefore);
  if (plan.resumeKind) deps.metrics.resumes.inc({ kind: plan.resumeKind, trigger: run.trigger });
  if (run.lastSignAt && !previous)
    deps.metrics.crashToResume.observe(crashToResumeSeconds(run.lastSignAt, Date.now()));
  for (const tool of plan.interruptedCalls)
    deps.metrics.toolCalls.inc({ tool: toolLabel(deps.tools, tool), outcome: "interrupted" });

  const extensions = deps.extensions && !deps.extensions.empty ? deps.extensions : null;
  const ctx = extensions
    ? await runContext(
        run,
        kind,
        plan.resumeKind ?? null,
        before,
        storedAgent,
        extensions.hookSignal(signal, { sessionId: run.sessionId, runId: run.id }),
        deps,
      )
    : null;
  // A handed-back run continued on the worker that called its beforeRun hooks does not call
  // them again; continued on another, it calls them here, so afterRun pairs on each worker.
  const begun = ctx && extensions && previous ? extensions.continuedHere(ctx) : false;
  const hookFailure = ctx && extensions && !begun ? await extensions.beforeRun(ctx) : null;
  if (ctx && extensions && !hookFailure && kind === "run" && run.input !== null && !previous)
    await extensions.onMessage(ctx, run.input);
  if (ctx && extensions)
    for (const message of started)
      await extensions.onCommitted(ctx, { runId: run.id, seq: message.seq, message });
  // The results the run starts with (a resume's answers to interrupted calls, calls closed
  // before new input) are committed results too: each gets its TOOL_FINISHED (contracts §7).
  for (const message of started)
    if (message.role === "tool") void events?.emit([toolFinishedEvent(run.id, message)], message.seq);
  void events?.emit();
  const observer = loopObserver(run.id, events, runBySeq, ctx, extensions);
  return {
    run,
    state,
    signal,
    deps,
    kind,
    logFields,
    startedAt,
    previous,
    ledger,
    before,
    ctx,
    extensions,
    hookFailure,
    observer,
  };
}

/**
 * Ends a run that appends nothing: a resume with nothing to resume, or a run whose first
 * messages Postgres refused. Returns the session's next queued run; a run found no longer
 * queued when it is started (as in `startRun`) is left to whoever ended or started it.
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
  const { error } = end;
  const started = await deps.writes.startRun(
    fence,
    cursorOf(history),
    { id: run.id, workerId: deps.workerId, resumeKind: null },
    [],
    tailStateAfter(history),
  );
  // Not queued any more (a cancel dropped it, and wrote its end and counted it; or another
  // worker started it): not this worker's to start or end — no event, no count, no hook.
  if (started === null) return (await deps.queries.nextQueuedRun(fence.sessionId)) ?? null;
  deps.log.info(withFields(logFields, { trigger: run.trigger, resumeKind: null }), "run started");
  await events?.emitBounded([runStartedEvent(run, kind, null)]);
  // The hooks pair (contracts §8): `beforeRun` before the end is written, as for a run that
  // starts, so an extension's per-run state set up there is there for `afterRun`. A resume
  // with nothing to resume called `afterRun` and `onError` alone. Its outcome is decided: a
  // throw is logged and counted (hook-runner.ts) and does not make it `failed`.
  const extensions = deps.extensions && !deps.extensions.empty ? deps.extensions : null;
  const ctx = extensions
    ? await runContext(
        run,
        kind,
        null,
        history,
        state.agent,
        extensions.hookSignal(signal, { sessionId: run.sessionId, runId: run.id }),
        deps,
      )
    : null;
  try {
    if (ctx && extensions) await extensions.beforeRun(ctx);
    const { next: nextRun, cancelled } = await deps.writes.endRun(fence, run.id, end.outcome, {
      error,
      ...(end.park ? { park: end.park } : {}),
    });
    // A cancel that committed between the run's start and its end, its signal lost: the run was
    // ended `cancelled` (contracts §9), parking nothing, and its event, metric and hooks say so.
    const outcome = cancelled ? "cancelled" : end.outcome;
    const park = cancelled ? undefined : end.park;
    // Counted once its end is stored: an end that fails is someone else's to end and count.
    deps.metrics.runs.inc({ kind, outcome });
    const ended: SessionEventInput[] = [{ type: "RUN_COMPLETED", runId: run.id, outcome }];
    if (park && nextRun === null) {
      deps.metrics.sessionsParked.inc({ reason: park.reason });
      deps.log.warn({ sessionId: fence.sessionId, runId: run.id, ...park }, "session parked");
      ended.push({ type: "SESSION_PARKED", reason: park.reason, parkId: run.id, runId: run.id });
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
    if (ctx && extensions) {
      // A resume that finds nothing to resume fails like any failed request (resume-semantics §2).
      await extensions.afterRun(ctx, { outcome, error });
      if (ERROR_OUTCOMES.has(outcome))
        await extensions.onError(ctx, new RunError(error, outcome, end.reason));
    }
    return nextRun;
  } finally {
    // The run's hook signal goes with the run (hook-runner.ts `hookSignal`).
    extensions?.releaseSignal(ctx?.signal);
  }
}
