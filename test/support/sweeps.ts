/**
 * The passes of an in-process sweeper, counted: what a test waits for where it checks that the
 * sweeper did NOT do something (resume, park, deliver again). A fixed sleep would be a window
 * in which, on a loaded machine, no pass may have run at all.
 */
import type { RunningSweeper } from "../../src/sweeper/sweeper-process.js";
import { waitFor } from "./fleet-env.js";

/**
 * Resolves once a whole wide scan (resumes of interrupted sessions, orphaned runs, leftovers,
 * batch ends and their webhooks) has run from its start after this call: a wide scan begins
 * with `sweepInterrupted` and never overlaps the next, so two beginnings seen from now hold a
 * whole one between them (about 1 s with SWEEP_INTERVAL_MS 200: one tick in five).
 */
export async function aWholeWideScan({ sweeper }: RunningSweeper, timeoutMs = 20_000): Promise<void> {
  const original = sweeper.sweepInterrupted;
  let began = 0;
  sweeper.sweepInterrupted = function (this: typeof sweeper, ...args) {
    began++;
    return original.apply(this, args);
  };
  try {
    await waitFor(() => began >= 2, timeoutMs, "a whole wide scan of the sweeper");
  } finally {
    sweeper.sweepInterrupted = original;
  }
}
