/**
 * The one explicit resume (`POST /v1/sessions/:id/resume`, `fleet resume`, each session of a
 * batch's resume page): checked against the session's history and runs, its run committed
 * and its job added, or joined to the same resume already waiting (FleetService.resume); an
 * automatic resume waiting out its backoff on another model gives way to it.
 */
import { isDeepStrictEqual } from "node:util";
import { assertToolsFit, parseModelConfig } from "../shared/agent-config.js";
import type { RunRow, SessionRow } from "../shared/db/schema.js";
import { AgentResumeError } from "../shared/errors.js";
import { type ModelRouting, resolveModelRoute } from "../shared/model-endpoints.js";
import { assertModelPriced, pricesOf } from "../shared/prices.js";
import type { ResumeKind } from "../shared/resume-point.js";
import type { RefusalReason } from "../shared/resume-reasons.js";
import type { RunLimits } from "../shared/store/session-queries.js";
import { afterCancel, dropJobIfCancelled } from "./cancel-cleanup.js";
import type { FleetServiceDeps } from "./fleet-service-deps.js";
import { parseBody, resumeBody } from "./request-bodies.js";
import { enqueueCommitted, enqueueResume, startNow, startWaitingRun } from "./run-jobs.js";

/** What the explicit resume uses of FleetService. */
export type ResumeHost = {
  readonly deps: FleetServiceDeps;
  routing(): ModelRouting;
  limits(): RunLimits;
  /** The caller's session; throws NotFoundError for a missing one or another tenant's. */
  session(tenant: string, id: string): Promise<SessionRow>;
};

/** Whether a waiting resume was asked for with the same model (none, or an equal one). */
function sameModel(a: unknown, b: unknown): boolean {
  return isDeepStrictEqual(a ?? null, b ?? null);
}

/**
 * Whether a waiting resume gives way to an explicit one that names another model: an automatic
 * one (the sweeper's, a worker's) that has not started (a run handed back for capacity has).
 * A resume that names no model does not replace one (an automatic resume may be on a fallback
 * the sweeper chose because the primary keeps failing): it is refused `running` as before.
 */
function replaceable(waiting: RunRow): boolean {
  return waiting.startedAt === null && (waiting.trigger === "sweeper" || waiting.trigger === "worker");
}

export async function explicitResume(
  host: ResumeHost,
  tenant: string,
  id: string,
  body: unknown,
): Promise<{ runId: string; kind: ResumeKind }> {
  const { deps } = host;
  const refuse = (reason: RefusalReason, detail?: string): AgentResumeError => {
    deps.metrics.resumeRefusals.inc({ reason });
    return new AgentResumeError(reason, detail);
  };
  const input = parseBody(resumeBody, body);
  const model = input?.model === undefined ? undefined : parseModelConfig(input.model, "model");
  if (model) resolveModelRoute(model, host.routing(), "model");
  const session = await host.session(tenant, id);
  // The model runs in the agent's place: a cost budget needs its price, as at creation.
  if (model) assertToolsFit(model, session.agent, "model");
  if (model && session.agent.budget?.maxCostUsd !== undefined)
    assertModelPriced(model, pricesOf(host.routing()), "model", "the session's agent.budget.maxCostUsd");
  // The history's shape and the runs not ended only: a session used for days has a history
  // of many MB and thousands of runs, none of it needed here.
  const [{ point, lastSeq }, active] = await Promise.all([
    deps.queries.historyPoint(id),
    deps.queries.unfinishedRuns(id, tenant),
  ]);
  // A message waiting on a parked session (waiting-input.ts): the resume starts it.
  if (
    session.status === "parked" &&
    active.length > 0 &&
    active.every((r) => r.kind === "run" && r.status === "queued")
  ) {
    if (!point.resumable && point.reason === "malformed") throw refuse(point.reason, point.detail);
    const limits = host.limits();
    const run = await deps.queries.startWaitingInput(id, {
      tenant,
      maxActiveSessions: limits.maxActiveSessions,
      model,
    });
    if (run) {
      await enqueueCommitted(deps, [run.id], () =>
        startWaitingRun(deps, tenant, { sessionId: id, runId: run.id }),
      );
      await dropJobIfCancelled(deps, tenant, { sessionId: id, runId: run.id, kind: "run" });
      return { runId: run.id, kind: "call_model" };
    }
  }
  const waiting = active.find((r) => r.kind === "resume" && r.status === "queued");
  // While a run is on its way there is nothing to resume yet (contracts §12); a request
  // that asks for exactly the resume already waiting joins it, and one on another model
  // replaces an automatic resume that waits to start (run-queueing.ts `replaceWaitingAutomatic`).
  const joinsOrReplaces = waiting && (sameModel(waiting.model, model) || (model && replaceable(waiting)));
  if (active.length > 0 && !(active.length === 1 && joinsOrReplaces))
    throw refuse("running", "a run of this session is queued or running");
  if (!point.resumable) throw refuse(point.reason, point.detail);
  // An explicit resume of a parked session (e.g. attempts exhausted) or a cancelled one
  // makes it active again.
  // What changed since the history and runs were read is seen under the session's lock.
  const { run, created, replaced } = await deps.queries
    .createRun(
      { sessionId: id, kind: "resume", trigger: "api", resumeKind: point.kind, model },
      { ...host.limits(), tenant, unpark: true, explicitResume: { lastSeq } },
    )
    .catch((error: unknown) => {
      if (error instanceof AgentResumeError) deps.metrics.resumeRefusals.inc({ reason: error.reason });
      throw error;
    });
  // The automatic resume it replaced is counted, its RUN_COMPLETED written and its job removed,
  // as a cancel's dropped run (cancel-cleanup.ts).
  if (replaced) await afterCancel(deps, tenant, { sessionIds: [], dropped: replaced, running: [] });
  if (!created && !sameModel(run.model, model))
    throw refuse("running", "another resume of this session is queued or running");
  await enqueueCommitted(deps, [run.id], () =>
    created
      ? enqueueResume(deps, tenant, { sessionId: id, runId: run.id })
      : startNow(deps, tenant, id, run.id),
  );
  await dropJobIfCancelled(deps, tenant, { sessionId: id, runId: run.id, kind: "resume" });
  return { runId: run.id, kind: point.kind };
}
