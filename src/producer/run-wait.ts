/** How `FleetClient.waitForRun` polls a run until it has ended (its doc says what it does). */
import { MAX_TIMER_MS, sleep, waitMs } from "./api-transport.js";
import { FleetApiError, FleetNetworkError } from "./client-errors.js";
import type { RunWithSession } from "./client-options.js";
import { pollDelay } from "./poll-delay.js";

/** `FleetClient.waitForRun`, asking with `getRun` (the client's). */
export async function pollUntilEnded(
  getRun: (runId: string, options: { signal?: AbortSignal | undefined }) => Promise<RunWithSession>,
  runId: string,
  options: {
    timeoutMs?: number | undefined;
    intervalMs?: number | undefined;
    signal?: AbortSignal | undefined;
  },
): Promise<RunWithSession> {
  // A NaN (an unset variable's `Number()`) never timed out, and as intervalMs polled every ms.
  const timeoutMs = waitMs("waitForRun()", "timeoutMs", options.timeoutMs, 60_000);
  const intervalMs =
    options.intervalMs === undefined
      ? undefined
      : waitMs("waitForRun()", "intervalMs", options.intervalMs, 0);
  const deadline = Date.now() + timeoutMs;
  const timedOut = () => new Error(`run ${runId} has not ended after ${timeoutMs} ms`);
  // Bounds the request in flight as well, and ends with the caller's signal.
  const controller = new AbortController();
  // setTimeout fires a delay past 2^31 - 1 ms (24.8 days; Infinity) after 1 ms: a longer
  // deadline is armed in steps, and an infinite one never.
  let expiry: ReturnType<typeof setTimeout> | undefined;
  const arm = () => {
    const left = deadline - Date.now();
    if (left > MAX_TIMER_MS) expiry = setTimeout(arm, MAX_TIMER_MS);
    else expiry = setTimeout(() => controller.abort(timedOut()), Math.max(0, left));
  };
  if (Number.isFinite(deadline)) arm();
  const onAbort = () => controller.abort(options.signal?.reason);
  options.signal?.addEventListener("abort", onAbort, { once: true });
  if (options.signal?.aborted) onAbort();
  // Once the run has been read, a poll that meets an API restarting (no connection, a broken
  // one, 502/503/504) is asked again until the deadline: a GET is safe to repeat. The first
  // poll's failure is not: a wrong URL or a run that is not there is said at once.
  let seen = false;
  let lastFailure: unknown;
  try {
    for (let poll = 0; ; poll++) {
      let run: RunWithSession | undefined;
      try {
        run = await getRun(runId, { signal: controller.signal });
        seen = true;
        lastFailure = undefined;
      } catch (error) {
        if (!seen || controller.signal.aborted || !passing(error)) throw error;
        lastFailure = error;
      }
      if (run?.status === "ended") return run;
      // Waiting on a parked session, it starts only when someone acts: waiting would last
      // until the deadline (for ever with none), and say nothing of why.
      if (run?.status === "queued" && run.sessionParkedReason !== undefined)
        throw new Error(
          `run ${runId} waits on its parked session (${run.sessionParkedReason}): it starts when someone resumes the session or sends it a message`,
        );
      if (Date.now() > deadline) throw lastFailure ? timedOutAfter(timedOut(), lastFailure) : timedOut();
      await sleep(pollDelay(poll, intervalMs), controller.signal);
      controller.signal.throwIfAborted();
    }
  } catch (error) {
    // The deadline's abort may land on a poll that was failing: say what it met.
    if (
      lastFailure &&
      error instanceof Error &&
      controller.signal.reason === error &&
      !options.signal?.aborted
    )
      throw timedOutAfter(error, lastFailure);
    throw error;
  } finally {
    clearTimeout(expiry);
    options.signal?.removeEventListener("abort", onAbort);
  }
}

/** A poll's failure that an API restarting or a proxy before it gives: worth asking again. */
function passing(error: unknown): boolean {
  if (error instanceof FleetNetworkError) return true;
  return error instanceof FleetApiError && [502, 503, 504].includes(error.status);
}

/** `timedOut` saying what the polls met last (`cause`). */
function timedOutAfter(timedOut: Error, failure: unknown): Error {
  const detail = failure instanceof Error ? failure.message : String(failure);
  return new Error(`${timedOut.message} (the last poll failed: ${detail})`, { cause: failure });
}
