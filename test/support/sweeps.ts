/**
 * The passes of an in-process sweeper, counted: what a test waits for where it checks that the
 * sweeper did NOT do something (resume, park, deliver again). A fixed sleep would be a window
 * in which, on a loaded machine, no pass may have run at all.
 */

import type { Sql } from "postgres";
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

/** An expired idempotency key held locked in a transaction: release it, then await `done`. */
export type HeldKey = { release: () => void; done: Promise<unknown> };

/**
 * Inserts an expired idempotency key and holds its row locked (`FOR UPDATE`) in a transaction
 * of its own, so that the sweeper's wide scan, which prunes expired keys first, waits on it.
 * Resolves once the lock is held.
 */
export async function holdExpiredKeyLocked(sql: Sql): Promise<HeldKey> {
  await sql`insert into idempotency_keys (tenant, key, request_hash, created_at)
            values ('default', 'held', 'x', now() - interval '3 days')`;
  let locked!: () => void;
  let release!: () => void;
  const isLocked = new Promise<void>((resolve) => {
    locked = resolve;
  });
  const done = sql.begin(async (tx) => {
    await tx`select 1 from idempotency_keys where key = 'held' for update`;
    locked();
    await new Promise<void>((resolve) => {
      release = resolve;
    });
  });
  await isLocked;
  return { release, done };
}
