/**
 * Why a job failed, written on its run (session-job.ts). A fault the run's loop does not turn
 * into an outcome — a tool's wrapper that throws, an extension that throws outside its hook,
 * a bug in the worker — fails the job and leaves its run `running`: the next claim (BullMQ's
 * retry) or the sweeper ends it `crashed`/`stalled`, and a resume follows. Its reason was only
 * in the worker's "job failed" log line; the run's `error` said nothing. The job writes it
 * there first, while it still holds the session, in one fenced statement: nothing else about
 * the run, its end or its resume changes, and a job that cannot write it (its lease lost,
 * Postgres away) leaves the run as before.
 */
import { jobFailureText } from "../shared/failure-text.js";
import type { Fence, FencedWrites } from "../shared/store/fenced-writes.js";
import { isServiceUnavailable } from "../shared/unavailable.js";
import type { LeaseGuard } from "./lease-guard.js";

/** How long a failed job waits for its run's error to be written before it fails all the same. */
export const FAILURE_WRITE_MS = 2_000;

/**
 * Writes `error`'s text on the run `runId` when the job still holds its lease (`guard`, from
 * memory: no wait) and the statement's fence agrees. Never throws; waits at most
 * FAILURE_WRITE_MS (the statement, if still pending then, changes nothing once another holder
 * took the session or the run ended). A job failed by an outage (Postgres or Redis
 * unavailable: its ride-out gave up) fails at once, as before: it writes nothing.
 */
export async function recordJobFailure(
  writes: Partial<Pick<FencedWrites, "recordRunFailure">>,
  guard: Pick<LeaseGuard, "isValid">,
  fence: Fence,
  runId: string,
  error: unknown,
): Promise<void> {
  if (!writes.recordRunFailure || !guard.isValid() || isServiceUnavailable(error)) return;
  let timer: NodeJS.Timeout | undefined;
  const written = writes
    .recordRunFailure(fence, runId, jobFailureText(error, process.env))
    .catch(() => false);
  await Promise.race([written, new Promise((resolve) => (timer = setTimeout(resolve, FAILURE_WRITE_MS)))]);
  clearTimeout(timer);
}
