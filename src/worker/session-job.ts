/**
 * One job: take the session's lease, claim the session (bump its fencing epoch, end runs an
 * earlier holder left behind), then take its queued runs one after the other, oldest first.
 * A second job for a busy session answers "busy" and waits its turn.
 */
import type { Logger } from "pino";
import { type ModelConfig, parseAgentConfig } from "../shared/agent-config.js";
import type { RunRow } from "../shared/db/schema.js";
import { FencedError, ValidationError } from "../shared/errors.js";
import type { EventWriter } from "../shared/event-writer.js";
import type { SessionEventInput } from "../shared/events.js";
import type { LeaseStore } from "../shared/lease.js";
import type { StoredMessage } from "../shared/messages.js";
import type { FleetMetrics } from "../shared/metrics.js";
import { scrubSecrets, secretValuesFromEnv } from "../shared/scrub-secrets.js";
import { SessionEventLog } from "../shared/session-event-log.js";
import type { AutomaticResumes } from "../shared/store/automatic-resumes.js";
import type { Fence, FencedWrites, HistoryCursor } from "../shared/store/fenced-writes.js";
import { lastStepSeq } from "../shared/store/rows.js";
import type { SessionQueries } from "../shared/store/session-queries.js";
import { tailState } from "../shared/tail-state.js";
import { type AgentLoopDeps, type LoopObserver, runAgentLoop } from "./agent-loop.js";
import { CapacityWait } from "./endpoint-gate.js";
import { ERROR_OUTCOMES, type Extensions, type RunContext, RunError } from "./extensions.js";
import {
  type CapacityDeps,
  CONTINUE,
  committedUsage,
  finalUsage,
  forgetWaiting,
  HandedBack,
  handBack,
  ledgerOf,
  previousPart,
  turnsTaken,
  withCapacityGate,
} from "./hand-back.js";
import { guardedWrites, LeaseGuard } from "./lease-guard.js";
import { withProviderErrorLog } from "./models/logged-provider.js";
import type { ModelEvent, ModelProvider, ModelRequest } from "./models/provider.js";
import type { RunOutcome } from "./run-outcome.js";
import { planRunStart } from "./start-run.js";
import { toolLabel } from "./tools/registry.js";

export type SessionJobDeps = AgentLoopDeps & {
  workerId: string;
  queries: Pick<SessionQueries, "nextQueuedRun"> & Partial<Pick<SessionQueries, "getSession">>;
  writes: Pick<FencedWrites, "append" | "claimSession" | "startRun" | "endRun" | "reserveModelCall"> &
    Partial<Pick<FencedWrites, "appendStep" | "appendAndEndRun">>;
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
  /** Session events (contracts §7); absent: none are written. */
  events?: EventWriter;
  /** The loaded extensions' hooks (contracts §8); absent: none. */
  extensions?: Extensions;
  /** Provider limits (contracts §15): endpoint gates and hand-backs; absent: no gate. */
  capacity?: CapacityDeps;
};

/** `handedBack`: a run waits for its endpoint's capacity; the job is to wait that many ms (contracts §15). */
export type JobResult = "done" | "busy" | "fenced" | { handedBack: number };

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

/**
 * `writes` whose appends tell `events` the session's `sessionEvents` as they read it, so that
 * a stream turned on or off while the job runs follows from its next append on.
 */
function followingEventsSetting(
  writes: SessionJobDeps["writes"],
  events: Pick<SessionEventLog, "setOn">,
): SessionJobDeps["writes"] {
  // A proxy, as guardedWrites is: the writes may be a class's instance, whose methods a spread would lose.
  return new Proxy(writes, {
    get(target, property, receiver) {
      const value: unknown = Reflect.get(target, property, receiver);
      if (typeof value !== "function" || (property !== "appendStep" && property !== "appendAndEndRun"))
        return value;
      return async (...args: unknown[]) => {
        const answer = (await value.apply(target, args)) as { sessionEvents?: boolean };
        if (answer.sessionEvents !== undefined) events.setOn(answer.sessionEvents);
        return answer;
      };
    },
  });
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
  /** The run this job is on (for the log line of a fenced-out job). */
  let currentRun: string | null = null;
  try {
    // The first run of a new session starts in the claim's own statement (fenced-writes.ts).
    const claim = await jobDeps.writes.claimSession(sessionId, deps.workerId, {
      startFirst: { tail: FIRST_RUN_TAIL },
    });
    if (claim === null) return "done";
    const fence: Fence = { sessionId, epoch: claim.epoch };
    const runBySeq = new Map<number, string>();
    // A session with `sessionEvents: false` has no stream: none is written for it. Read with the
    // claim, and again by every append of this job (PATCH /v1/sessions/:id may change it).
    const events = deps.events
      ? new SessionEventLog(
          deps.events,
          sessionId,
          claim.history,
          (m) => runBySeq.get(m.seq) ?? null,
          (error) =>
            deps.log.warn({ err: error, sessionId }, "writing session events failed; retried with the next"),
          // A session with no message has none in its stream either: no need to ask Redis.
          claim.history.length === 0 ? 0 : null,
          claim.sessionEvents,
        )
      : null;
    const runDeps = events ? { ...jobDeps, writes: followingEventsSetting(jobDeps.writes, events) } : jobDeps;
    for (const { kind } of claim.staleRuns) deps.metrics.runs.inc({ kind, outcome: "crashed" });
    // The runs this claim ended: their messages the stream lacks first, then their ends.
    if (events && claim.staleRunIds.length > 0)
      await events.emitBounded(
        claim.staleRunIds.map((runId) => ({ type: "RUN_COMPLETED", runId, outcome: "crashed" })),
      );
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
      parsedAgent: null,
      budget: { tokensUsed: claim.tokensUsed },
      events,
      runBySeq,
    };
    let started = claim.started;
    // A run the claim started is taken to its end even when the job was aborted meanwhile.
    while (next && (started !== null || !controller.signal.aborted)) {
      currentRun = next.id;
      next = await processRun(next, state, controller.signal, runDeps, started);
      started = null;
    }
    return "done";
  } catch (error) {
    if (error instanceof HandedBack) {
      deps.log.info(
        { sessionId, runId: error.runId, delayMs: error.delayMs },
        "run handed back: waiting for capacity",
      );
      return { handedBack: error.delayMs };
    }
    if (error instanceof FencedError) {
      deps.metrics.fencedWrites.inc();
      deps.log.warn(
        { sessionId, ...(currentRun ? { runId: currentRun } : {}), reason: error.message },
        "fenced out: this worker lost the lease; stopping",
      );
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
async function requestResume(
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
const FIRST_RUN_TAIL = tailState([{ role: "user", content: "" }]);

type SessionState = {
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
async function processRun(
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

/**
 * A run the agent's own model ended with a refusal the provider would repeat (a 401/403, a
 * model that does not exist, a key that is not set: call-model.ts `rejected`), on an agent
 * with no fallback model: no automatic resume can succeed, so the session is parked
 * `provider_rejected` at once, with the provider's message, instead of calling the provider
 * SWEEPER_MAX_ATTEMPTS times more. With fallback models, the worker asks for the resume on
 * the first of them at once (`primaryRejected`). When the run used another model (a fallback,
 * or one a resume asked for), the resume policy goes on as for any provider error.
 */
function rejectedForGood(
  result: { outcome: RunOutcome; rejected?: true },
  run: RunRow,
  agent: SessionState["parsedAgent"],
): boolean {
  return primaryRefused(result, run) && agent !== null && (agent.fallbackModels ?? []).length === 0;
}

/** The same refusal on an agent with fallback models: the next resume uses one at once. */
function primaryRejected(
  result: { outcome: RunOutcome; rejected?: true },
  run: RunRow,
  agent: SessionState["parsedAgent"],
): boolean {
  return primaryRefused(result, run) && agent !== null && (agent.fallbackModels ?? []).length > 0;
}

function primaryRefused(result: { outcome: RunOutcome; rejected?: true }, run: RunRow): boolean {
  return result.outcome === "provider_error" && result.rejected === true && run.model === null;
}

function runStartedEvent(run: RunRow, kind: "run" | "resume", resumeKind: string | null): SessionEventInput {
  return { type: "RUN_STARTED", runId: run.id, kind, resumeKind, trigger: run.trigger };
}

/** The context extensions' hooks get (contracts §8); the session's metadata is read once. */
async function runContext(
  run: RunRow,
  kind: "run" | "resume",
  resumeKind: string | null,
  history: readonly StoredMessage[],
  agent: unknown,
  signal: AbortSignal,
  deps: SessionJobDeps,
): Promise<RunContext> {
  const session = await deps.queries.getSession?.(run.sessionId);
  return {
    sessionId: run.sessionId,
    runId: run.id,
    kind,
    resumeKind,
    trigger: run.trigger,
    agent,
    metadata: session?.metadata ?? {},
    signal,
    inputMessage: kind === "run" ? run.input : null,
    history,
  };
}

/** `TOOL_FINISHED` for a committed tool result. */
function toolFinishedEvent(runId: string, message: StoredMessage & { role: "tool" }): SessionEventInput {
  return {
    type: "TOOL_FINISHED",
    runId,
    toolCallId: message.toolCallId,
    name: message.name,
    success: message.success,
  };
}

/** Events and extensions told of what the agent loop commits and starts. */
function loopObserver(
  runId: string,
  events: SessionEventLog | null,
  runBySeq: Map<number, string>,
  ctx: RunContext | null,
  extensions: Extensions | null,
): LoopObserver {
  // A commit with no event of its own is written with whatever this job writes next — the
  // TOOL_STARTED that follows an assistant step, a run's RUN_COMPLETED — when that comes
  // within the same turn of the event loop (one Redis call instead of two); else on its own.
  let flushScheduled = false;
  const flushSoon = () => {
    if (flushScheduled || !events) return;
    flushScheduled = true;
    setImmediate(() => {
      flushScheduled = false;
      void events.emit();
    });
  };
  return {
    awaitsHooks: ctx !== null,
    async committed(message) {
      runBySeq.set(message.seq, runId);
      const extra: SessionEventInput[] = [];
      if (
        message.role === "assistant" &&
        message.stopReason !== "end_turn" &&
        message.stopReason !== "tool_use"
      )
        extra.push({ type: "MODEL_STOPPED", runId, stopReason: message.stopReason });
      // Every committed result, also one this run did not start (contracts §7: "its result is
      // committed"): a call interrupted by a crash and answered by the resume, a call answered
      // as cancelled, so a reader never sees a TOOL_STARTED left open.
      if (message.role === "tool") extra.push(toolFinishedEvent(runId, message));
      // Not awaited: the log writes in order, after this commit; the run's end waits for it.
      if (extra.length > 0) void events?.emit(extra);
      else flushSoon();
      if (ctx) await extensions!.onCommitted(ctx, { runId, seq: message.seq, message });
    },
    async toolStarted(call) {
      void events?.emit([{ type: "TOOL_STARTED", runId, toolCallId: call.id, name: call.name }]);
    },
  };
}

/** `model`, with its text deltas written as MESSAGE_DELTA events (best effort). */
function withDeltas(model: ModelProvider, events: SessionEventLog | null, runId: string): ModelProvider {
  if (!events?.enabled) return model;
  return {
    ...(model.identity === undefined ? {} : { identity: model.identity }),
    async *stream(request: ModelRequest): AsyncIterable<ModelEvent> {
      for await (const event of model.stream(request)) {
        if (event.type === "text") events.delta(runId, event.delta);
        yield event;
      }
    },
  };
}

function cursorOf(history: readonly StoredMessage[]): HistoryCursor {
  return { lastSeq: history.at(-1)?.seq ?? 0, lastStepSeq: lastStepSeq(history) };
}
