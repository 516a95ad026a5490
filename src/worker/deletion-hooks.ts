/**
 * Calls the extensions' `onSessionDeleted` hooks (contracts §8, additive) for the sessions
 * deletes wrote to the `session_deletions` outbox (store/data-deletion.ts). A worker with such
 * a hook takes up to BATCH owed deletions at a time, for a claim long enough for every hook
 * of every one of them to time out; calls the hooks (each within FLEET_HOOK_TIMEOUT_MS, a
 * failure logged and counted, never retried: invariant 5); then removes the rows. A worker
 * that dies in between leaves its rows to another after the claim: at least once. A row
 * taken MAX_ATTEMPTS times (its hooks kill the worker) is given up with a warning.
 *
 * It looks when a delete is announced (the cancel channel's `deleted`), and every
 * POLL_MS for what it did not hear of. A worker without the hook calls nothing; every
 * DROP_EVERY_MS it removes the rows no worker took within UNTAKEN_MS (no worker of the fleet
 * has the hook), so that the table does not grow with every delete.
 */
import type { Logger } from "pino";
import type { DataDeletion, OwedDeletion } from "../shared/store/data-deletion.js";
import type { Extensions } from "./hook-runner.js";

const BATCH = 10;
const POLL_MS = 10_000;
export const MAX_ATTEMPTS = 3;
export const UNTAKEN_MS = 3_600_000;
const DROP_EVERY_MS = 60_000;

/** How long a worker holds the deletions it took (pure): every hook of each may run out its time. */
export function claimMs(hooks: number, timeoutMs: number, batch = BATCH): number {
  return batch * Math.max(1, hooks) * timeoutMs + 60_000;
}

export class DeletionHooks {
  private draining: Promise<unknown> | null = null;
  private again = false;
  private timer: NodeJS.Timeout | null = null;
  private readonly stopping = new AbortController();

  constructor(
    private readonly store: Pick<DataDeletion, "claimDeletions" | "forgetDeletions" | "dropUntakenDeletions">,
    private readonly extensions: Pick<Extensions, "sessionDeleted" | "handlesDeletes" | "list">,
    private readonly log: Pick<Logger, "warn">,
    private readonly timeoutMs: number,
  ) {}

  /** Looks now and every POLL_MS (nothing when no extension has the hook). */
  start(pollMs = POLL_MS): void {
    if (!this.extensions.handlesDeletes) {
      this.timer = setInterval(() => {
        this.store
          .dropUntakenDeletions(UNTAKEN_MS, 10_000)
          .catch((error: unknown) => this.log.warn({ err: error }, "could not drop untaken deletions"));
      }, DROP_EVERY_MS);
      this.timer.unref();
      return;
    }
    this.wake();
    this.timer = setInterval(() => this.wake(), pollMs);
    this.timer.unref();
  }

  /** Takes and handles what is owed, unless a pass is under way (it then looks again after). */
  wake(): void {
    if (!this.extensions.handlesDeletes || this.stopping.signal.aborted) return;
    if (this.draining) {
      this.again = true;
      return;
    }
    this.draining = this.drain()
      .catch((error: unknown) =>
        this.log.warn(
          { err: error },
          "onSessionDeleted hooks: could not read the owed deletions; trying again later",
        ),
      )
      .finally(() => {
        this.draining = null;
        if (this.again) {
          this.again = false;
          this.wake();
        }
      });
  }

  /** Handles owed deletions until none is left to take. */
  async drain(): Promise<number> {
    const hooks = this.extensions.list.filter((e) => e.onSessionDeleted).length;
    let handled = 0;
    for (;;) {
      if (this.stopping.signal.aborted) return handled;
      const owed = await this.store.claimDeletions(BATCH, claimMs(hooks, this.timeoutMs));
      const done: string[] = [];
      for (const deletion of owed) {
        // Stopping: what is not handled yet is taken again after the claim, by any worker.
        if (this.stopping.signal.aborted) break;
        await this.handle(deletion);
        // Stopped during its hooks, which were then no longer waited for: owed still.
        if (this.stopping.signal.aborted) break;
        done.push(deletion.sessionId);
      }
      await this.store.forgetDeletions(done);
      handled += done.length;
      if (owed.length < BATCH || done.length < owed.length) return handled;
    }
  }

  private async handle(deletion: OwedDeletion): Promise<void> {
    const { sessionId, tenant, deletedAt, attempts } = deletion;
    if (attempts > MAX_ATTEMPTS) {
      this.log.warn(
        { sessionId, attempts: attempts - 1 },
        "onSessionDeleted hooks: given up on this session (a worker stopped while calling them each time)",
      );
      return;
    }
    await this.extensions.sessionDeleted(
      sessionId,
      { tenant, deletedAt, attempt: attempts },
      this.stopping.signal,
    );
  }

  /**
   * Stops looking; a pass under way ends at once, no longer waiting for the hook it is in (its
   * signal aborted): that session stays owed, taken again after the claim.
   */
  async stop(): Promise<void> {
    this.stopping.abort();
    if (this.timer) clearInterval(this.timer);
    await this.draining;
  }
}
