/**
 * The end of a run (process-run.ts): the statement that ends it (with its last step when
 * the loop deferred it), parking the session when its outcome says so, RUN_COMPLETED (and
 * SESSION_PARKED), the `afterRun`/`onError` hooks, the "run ended" line, and what follows:
 * a resume on the first fallback model, a stop the sweeper must see, a cancelled job's
 * hand-over. Returns the session's next queued run.
 */
import type { RunRow } from "../shared/db/schema.js";
import type { SessionEventInput } from "../shared/events.js";
import { PRIMARY_REJECTED_PREFIX, WORKER_STOPPED_ERROR } from "../shared/run-outcomes.js";
import { scrubSecrets, secretValuesFromEnv } from "../shared/scrub-secrets.js";
import type { FencedWrites } from "../shared/store/fenced-writes.js";
import { withFields } from "../shared/with-fields.js";
import { ERROR_OUTCOMES, RunError } from "./extensions.js";
import { requestResume } from "./request-resume.js";
import type { LoopResult } from "./run-loop.js";
import {
  logStorageRejection,
  NEEDS_SWEEPER,
  PARK_AT_ONCE,
  primaryRejected,
  type RunOutcome,
  rejectedForGood,
  stoppedByWorker,
  storageRejection,
  storageRejectionText,
} from "./run-outcome.js";
import { cursorOf, type StartedRun } from "./run-state.js";

type Park = { reason: RunOutcome | "provider_rejected"; detail?: string };

/** Ends the started run as `loopResult` says; returns the session's next queued run. */
export async function finishRun(started: StartedRun, loopResult: LoopResult): Promise<RunRow | null> {
  const { run, state, deps, kind, logFields, startedAt, ctx, extensions, observer, signal } = started;
  const { fence, history, events } = state;
  // Cut by this worker's graceful stop: said so in the stored error, which whoever schedules
  // the hand-over's resume reads (this worker below, or a sweeper): it is not counted as a crash.
  let result = stoppedByWorker(loopResult.outcome, signal)
    ? { ...loopResult, error: WORKER_STOPPED_ERROR }
    : loopResult;
  let park: Park | undefined = PARK_AT_ONCE.has(result.outcome)
    ? { reason: result.outcome, detail: result.error }
    : rejectedForGood(result, run, state.parsedAgent)
      ? { reason: "provider_rejected", detail: result.error }
      : undefined;
  // A primary refused for good is said so in the stored error: whoever schedules the next
  // resume (this worker below, or a sweeper whose scan sees the ended run first) reads it
  // there and goes to a fallback model at once (run-outcomes.ts PRIMARY_REJECTED_PREFIX).
  const toFallback = !park && primaryRejected(result, run, state.parsedAgent);
  const storedError =
    result.error == null ? null : toFallback ? `${PRIMARY_REJECTED_PREFIX}${result.error}` : result.error;
  const endDetail = { error: storedError, usage: result.usage, park };
  let next: RunRow | null;
  /** A cancel committed while the run was running: its end was recorded `cancelled`. */
  let cancelled = false;
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
      logStorageRejection(deps.log, logFields, error);
      result = { outcome: refused, error: storageRejectionText(error), usage: result.usage };
    }
    if (ended) {
      const [stored] = ended.stored;
      history.push(stored!);
      await observer.committed(stored!);
      ({ next, cancelled } = ended);
    } else {
      park = { reason: result.outcome, detail: result.error };
      ({ next, cancelled } = await deps.writes.endRun(fence, run.id, result.outcome, {
        ...endDetail,
        error: result.error ?? null,
        park,
      }));
    }
  } else {
    ({ next, cancelled } = await deps.writes.endRun(fence, run.id, result.outcome, endDetail));
  }
  // A cancel committed while the run was out on its last model call (its signal lost, or come
  // once the model had answered), whether the run's end stored its last step or nothing (a
  // limit, a provider's error): the statement ended the run `cancelled`, parking nothing
  // (contracts §9), and its event, metric and hooks say so too — as when the signal came.
  if (cancelled && result.outcome !== "cancelled") {
    result = { ...result, outcome: "cancelled" };
    park = undefined;
  }
  deps.metrics.runs.inc({ kind, outcome: result.outcome });
  const ended: SessionEventInput[] = [{ type: "RUN_COMPLETED", runId: run.id, outcome: result.outcome }];
  if (park && next === null) {
    deps.metrics.sessionsParked.inc({ reason: park.reason });
    deps.log.warn(
      { sessionId: fence.sessionId, runId: run.id, reason: park.reason, detail: park.detail },
      "session parked",
    );
    // Its `parkId`, the run's: a repair of this lost write (EventWriter.missingRunEnd) writes the same.
    ended.push({ type: "SESSION_PARKED", reason: park.reason, parkId: run.id, runId: run.id });
  }
  // Hooks see the run's end written first. Without hooks nothing here waits for it: the log
  // writes it after every earlier event, a next run's events follow it in the same order, and
  // the job waits for all of them before it gives up the lease (session-job.ts). So the
  // session's slot is not held for this round trip to Redis as well.
  if (ctx && extensions) await events?.emitBounded(ended);
  else void events?.emit(ended);
  if (ctx && extensions) {
    await extensions.afterRun(ctx, {
      outcome: result.outcome,
      ...(result.error ? { error: result.error } : {}),
    });
    if (ERROR_OUTCOMES.has(result.outcome))
      await extensions.onError(ctx, new RunError(result.error ?? result.outcome, result.outcome));
  }
  deps.log.info(
    withFields(
      logFields,
      result.error
        ? {
            outcome: result.outcome,
            durationMs: Date.now() - startedAt,
            error: scrubSecrets(result.error, secretValuesFromEnv(process.env)),
          }
        : { outcome: result.outcome, durationMs: Date.now() - startedAt },
    ),
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
    // This worker is stopping: hand the session to another worker right away (a cancel's
    // session is cancelled, and nothing is scheduled for it).
    await requestResume(fence.sessionId, deps);
  }
  return next;
}
