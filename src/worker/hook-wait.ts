/**
 * Waiting for one extension hook (hook-runner.ts): within its time limit, and no longer than
 * its run's signal says, for the aborts that stop the wait.
 */
import { WORKER_STOP_REASON } from "./run-outcome.js";

/** Whether a run's signal was aborted by its worker's stop, past the grace period. */
export const isWorkerStop = (reason: unknown): boolean => reason === WORKER_STOP_REASON;

/**
 * Calls `run` (one hook) and waits for it at most `timeoutMs`: a hook that never settles would
 * hold its run (and its worker slot) forever, and a cancel could not end it. Past the limit the
 * hook has failed (this rejects), and whatever it still does, it does on its own. Once `abort`
 * is aborted (also: already) by a reason `stopsWaiting` accepts (absent: any), the wait ends
 * without a failure and the hook goes on on its own.
 */
export async function waitForHook(
  what: { hook: string; extension: string; timeoutMs: number },
  run: () => unknown,
  abort?: AbortSignal,
  stopsWaiting?: (reason: unknown) => boolean,
): Promise<void> {
  let timer: NodeJS.Timeout | undefined;
  const late = new Promise<never>((_resolve, reject) => {
    timer = setTimeout(
      () =>
        reject(
          new Error(
            `the ${what.hook} hook of extension "${what.extension}" did not finish within ${what.timeoutMs} ms`,
          ),
        ),
      what.timeoutMs,
    );
  });
  const waits: Promise<unknown>[] = [Promise.resolve().then(run), late];
  let onAbort: (() => void) | undefined;
  if (abort)
    waits.push(
      new Promise<void>((resolve) => {
        onAbort = () => {
          if (!stopsWaiting || stopsWaiting(abort.reason)) resolve();
        };
        if (abort.aborted) onAbort();
        else abort.addEventListener("abort", onAbort, { once: true });
      }),
    );
  try {
    await Promise.race(waits);
  } finally {
    clearTimeout(timer);
    if (onAbort) abort?.removeEventListener("abort", onAbort);
  }
}
