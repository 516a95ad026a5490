/**
 * What follows a cancel of a session or a batch once it has committed: workers abort what
 * runs, the queued runs it ended are counted, their jobs removed and their RUN_COMPLETED
 * written, and a tenant left with nothing waiting starts over in the fair order.
 */
import { QUEUES } from "../shared/queues.js";
import type { DroppedRun } from "../shared/store/batches.js";
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
  },
): Promise<void> {
  for (let i = 0; i < result.sessionIds.length; i += 1_000)
    await deps.cancelSignal?.(result.sessionIds.slice(i, i + 1_000)).catch(() => {});
  // Best effort: a request not forgotten stops counting by itself soon after its place comes.
  const waited = result.dropped.filter((run) => run.handedBack).map((run) => run.id);
  if (waited.length > 0) await deps.waitsGone?.(tenant, waited).catch(() => {});
  // Queued runs the cancel ended never reach a worker, which counts every run it ends: they
  // are counted here, once (the cancel's statement ended each of them once).
  for (const run of result.dropped)
    deps.metrics.runs.inc({ kind: run.kind === "resume" ? "resume" : "run", outcome: "cancelled" });
  // Best effort: a job left behind finds its run ended and does nothing.
  const dropped = [...result.dropped];
  const lane = async () => {
    for (let run = dropped.pop(); run; run = dropped.pop()) {
      const name = run.kind === "resume" ? "resume" : "run";
      const jobId = QUEUES.runs.jobId({ sessionId: run.sessionId, runId: run.id });
      const job = await deps.queues.getJob(name, jobId).catch(() => undefined);
      await job?.remove().catch(() => {});
      if (run.sessionEvents !== false)
        await deps.runEnded?.(run.sessionId, run.id, "cancelled").catch(() => {});
    }
  };
  const removed = Promise.all(Array.from({ length: 16 }, lane));
  // Fair dispatch: a tenant left with nothing waiting starts over (fair-dispatch.ts `forget`).
  // Best effort: the cancel has committed, and a failure here only leaves the order as it was.
  if (result.dropped.length > 0 && !(await deps.queries.tenantHasQueuedRuns(tenant).catch(() => true))) {
    await deps.priorities?.forget?.(tenant).catch(() => {});
    await deps.resumePriorities?.forget?.(tenant).catch(() => {});
  }
  // A big batch's jobs are removed after the answer (its runs have ended already).
  if (result.dropped.length <= 1_000) await removed;
}
