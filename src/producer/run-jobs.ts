/**
 * Adding the jobs of runs already committed, each with its tenant's fair priority
 * (fair-dispatch.ts): new runs, resumes someone asked for, and a waiting resume started now.
 */
import { randomUUID } from "node:crypto";
import { QUEUES } from "../shared/queues.js";
import type { FleetServiceDeps } from "./fleet-service-deps.js";

type JobDeps = Pick<FleetServiceDeps, "queues" | "priorities" | "resumePriorities">;

/**
 * Adds the jobs of runs already committed. The request has acted once its run is stored: a
 * job Redis did not take is added by the sweeper (orphaned queued runs) when Redis answers
 * again, so a failure here is logged, not answered with a 5xx — which would release the
 * request's Idempotency-Key, and the caller's retry would store its input a second time.
 */
export async function enqueueCommitted(
  deps: Pick<FleetServiceDeps, "onEnqueueFailed">,
  runIds: string[],
  add: () => Promise<unknown>,
): Promise<void> {
  if (runIds.length === 0) return;
  try {
    await add();
  } catch (error) {
    deps.onEnqueueFailed?.(error, runIds);
  }
}

/** Queues the first runs of new sessions (a batch's) in one round trip, with their tenant's fair priorities. */
export async function enqueueRuns(
  deps: JobDeps,
  tenant: string,
  jobs: { name: "run"; payload: { sessionId: string; runId: string } }[],
): Promise<void> {
  const priorities = await deps.priorities?.assign(tenant, jobs.length);
  await deps.queues.enqueueMany(jobs.map((job, i) => ({ ...job, priority: priorities?.[i] })));
  if (priorities)
    await deps.priorities?.added?.(
      priorities,
      jobs.map((job) => QUEUES.runs.jobId(job.payload)),
    );
}

/** Queues a run with new input, with its tenant's fair priority. */
export async function enqueueRun(
  deps: JobDeps,
  tenant: string,
  payload: { sessionId: string; runId: string },
): Promise<void> {
  const priorities = await deps.priorities?.assign(tenant, 1);
  const jobId = await deps.queues.enqueue("run", payload, { priority: priorities?.[0] });
  if (priorities) await deps.priorities?.added?.(priorities, [jobId]);
}

/**
 * Someone asked for the resume that is already waiting: it need not wait any longer. One
 * that waits out its backoff starts now; one whose job Redis lost, or whose job ended
 * without starting it (the queue gave up on it, and the session was parked), gets its job
 * again now rather than at the sweeper's next look. Someone acting is not an automatic
 * resume: nothing is counted.
 */
export async function startNow(
  deps: JobDeps,
  tenant: string,
  sessionId: string,
  runId: string,
): Promise<void> {
  const payload = { sessionId, runId };
  const job = await deps.queues.getJob("resume", QUEUES.resumes.jobId(payload));
  if (job && (await job.isDelayed())) {
    await job.promote().catch(() => {});
    return;
  }
  if (job && !(await job.isCompleted()) && !(await job.isFailed())) return;
  await job?.remove().catch(() => {});
  await enqueueResume(deps, tenant, payload);
}

/** Queues a resume someone asked for, with its tenant's fair priority. */
export async function enqueueResume(
  deps: JobDeps,
  tenant: string,
  payload: { sessionId: string; runId: string },
): Promise<void> {
  const priorities = await deps.resumePriorities?.assign(tenant, 1);
  const jobId = await deps.queues.enqueue("resume", payload, { priority: priorities?.[0] });
  if (priorities) await deps.resumePriorities?.added?.(priorities, [jobId]);
}

/**
 * Someone resumed a parked session on which a message waits (waiting-input.ts): its run gets a
 * job now. Its own job may wait still (a delayed one starts now). One that ended without
 * starting the run, or that Redis lost, is added again under its id, as `startNow` does (the
 * sweeper's orphan pass would otherwise count a retry); one still held by a worker that died
 * gets a job of another id beside it (a job runs its session's next run, whichever: one
 * more changes nothing). Someone acting: nothing is counted.
 */
export async function startWaitingRun(
  deps: JobDeps,
  tenant: string,
  payload: { sessionId: string; runId: string },
): Promise<void> {
  const jobId = QUEUES.runs.jobId(payload);
  const job = await deps.queues.getJob("run", jobId);
  const state = await job?.getState();
  if (state === "delayed") {
    await job?.promote().catch(() => {});
    return;
  }
  if (state === "waiting" || state === "prioritized" || state === "waiting-children") return;
  const held = state === "active";
  if (!held) await job?.remove().catch(() => {});
  const priorities = await deps.priorities?.assign(tenant, 1);
  const added = await deps.queues.enqueue("run", payload, {
    ...(held ? { jobId: `${jobId}-resumed-${randomUUID()}` } : {}),
    priority: priorities?.[0],
  });
  if (priorities) await deps.priorities?.added?.(priorities, [added]);
}
