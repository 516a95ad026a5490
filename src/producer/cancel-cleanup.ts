/**
 * What follows a cancel of a session or a batch once it has committed: workers abort what
 * runs, the queued runs it ended are counted, their jobs removed and their RUN_COMPLETED
 * written, and a tenant left with nothing waiting starts over in the fair order.
 */
import { QUEUES } from "../shared/queues.js";
import type { DroppedRun, RunningRun } from "../shared/store/batches.js";
import type { FleetServiceDeps } from "./fleet-service-deps.js";

/** After the cancel committed: workers abort what runs, and the dropped runs' jobs go. */
export async function afterCancel(
  deps: Pick<
    FleetServiceDeps,
    | "cancelSignal"
    | "waitsGone"
    | "metrics"
    | "queues"
    | "runEnded"
    | "queries"
    | "priorities"
    | "resumePriorities"
  >,
  tenant: string,
  result: {
    sessionIds: string[];
    dropped: DroppedRun[];
    /** The runs it found running: the signal names them, and workers abort those only. */
    running: RunningRun[];
  },
): Promise<void> {
  for (let i = 0; i < result.sessionIds.length; i += 1_000) {
    const sessionIds = result.sessionIds.slice(i, i + 1_000);
    const chunk = new Set(sessionIds);
    const runIds = result.running.filter((run) => chunk.has(run.sessionId)).map((run) => run.id);
    await deps.cancelSignal?.(sessionIds, runIds).catch(() => {});
  }
  // Best effort: a request not forgotten stops counting by itself soon after its place comes.
  const waited = result.dropped.filter((run) => run.handedBack).map((run) => run.id);
  if (waited.length > 0) await deps.waitsGone?.(tenant, waited).catch(() => {});
  // Queued runs the cancel ended never reach a worker, which counts every run it ends: they
  // are counted here, once (the cancel's statement ended each of them once).
  for (const run of result.dropped)
    deps.metrics.runs.inc({ kind: run.kind === "resume" ? "resume" : "run", outcome: "cancelled" });
  const removed = removeJobs(deps, result.dropped, async (run) => {
    if (run.sessionEvents !== false)
      await deps.runEnded?.(run.sessionId, run.id, "cancelled").catch(() => {});
  });
  if (result.dropped.length > 0) await startOverIfIdle(deps, tenant);
  // A big batch's jobs are removed after the answer (its runs have ended already).
  if (result.dropped.length <= 1_000) await removed;
}

/**
 * After a batch's runs were committed and their jobs added: when a cancel (or a delete) of the
 * batch committed in between (it found no job to remove), the jobs just added belong to runs it
 * ended, so they are removed and the tenant's fair order starts over as after the cancel.
 * Left, each waited for a worker to take and drop it, and the tenant's next runs were
 * queued behind them. Best effort, as the cancel's own clean-up.
 */
export async function dropJobsOfCancelled(
  deps: CleanupDeps,
  tenant: string,
  batchId: string,
  runs: { sessionId: string; runId: string }[],
): Promise<void> {
  if (runs.length === 0 || !(await deps.queries.batchCancelled(batchId).catch(() => false))) return;
  await removeJobs(
    deps,
    runs.map(({ sessionId, runId }) => ({ id: runId, sessionId, kind: "run" })),
  );
  await startOverIfIdle(deps, tenant);
}

/**
 * After a message's or an explicit resume's run was committed and its job added: when a cancel
 * (or a delete) of its session committed in between, it ended the run but found no job to remove, so the
 * job just added is removed here and the tenant's fair order starts over as after the cancel.
 * Left, it waited for a worker to take and drop it. A cancel that commits after this read
 * finds the job and removes it itself. Best effort, as the cancel's own clean-up.
 */
export async function dropJobIfCancelled(
  deps: CleanupDeps,
  tenant: string,
  run: { sessionId: string; runId: string; kind: "run" | "resume" },
): Promise<void> {
  // Gone (its session deleted meanwhile, which found no job to remove either): removed too.
  const row = await deps.queries.getRun(run.runId, tenant).catch(() => null);
  if (row === null) return;
  if (row !== undefined && (row.status !== "ended" || row.endedReason !== "cancelled")) return;
  await removeJobs(deps, [{ id: run.runId, sessionId: run.sessionId, kind: run.kind }]);
  await startOverIfIdle(deps, tenant);
}

type CleanupDeps = Pick<FleetServiceDeps, "queues" | "queries" | "priorities" | "resumePriorities">;

/** Removes the jobs of runs that have ended, 16 at a time; `then` follows each. Best effort: a job left behind finds its run ended and does nothing. */
function removeJobs<R extends { id: string; sessionId: string; kind: string }>(
  deps: Pick<FleetServiceDeps, "queues">,
  runs: R[],
  then?: (run: R) => Promise<void>,
): Promise<unknown> {
  const left = [...runs];
  const lane = async () => {
    for (let run = left.pop(); run; run = left.pop()) {
      const name = run.kind === "resume" ? "resume" : "run";
      const jobId = QUEUES.runs.jobId({ sessionId: run.sessionId, runId: run.id });
      const job = await deps.queues.getJob(name, jobId).catch(() => undefined);
      await job?.remove().catch(() => {});
      await then?.(run);
    }
  };
  return Promise.all(Array.from({ length: 16 }, lane));
}

/**
 * Fair dispatch: a tenant left with nothing waiting starts over (fair-dispatch.ts `forget`),
 * after a cancel here and after a delete (deletions.ts). Best effort: a failure here only
 * leaves the order as it was.
 */
export async function startOverIfIdle(
  deps: Pick<FleetServiceDeps, "queries" | "priorities" | "resumePriorities">,
  tenant: string,
): Promise<void> {
  if (await deps.queries.tenantHasQueuedRuns(tenant).catch(() => true)) return;
  await deps.priorities?.forget?.(tenant).catch(() => {});
  await deps.resumePriorities?.forget?.(tenant).catch(() => {});
}
