/** The sweeper's guard around one session's sweep: a failure is warned about once per session, and never stops the others. */
import type { SweeperDeps } from "./sweeper-deps.js";

/** Failing sessions remembered so as to warn once each (then the memory starts over). */
const MAX_FAILING_REMEMBERED = 10_000;

export class SessionFailures {
  /** Sessions whose last sweep failed: their next failures are not warned about again. */
  private readonly failing = new Set<string>();

  constructor(private readonly deps: Pick<SweeperDeps, "log" | "signal">) {}

  private get stopping(): boolean {
    return this.deps.signal?.aborted === true;
  }

  /**
   * One session's failure is logged and retried next tick; it never stops the others. It is
   * logged once until that session is swept again without one: a Redis refusing writes
   * (maxmemory with noeviction) fails every waiting session on every tick.
   */
  async guarded<T>(sessionId: string, fn: () => Promise<T>): Promise<T | undefined> {
    try {
      const result = await fn();
      this.failing.delete(sessionId);
      return result;
    } catch (error) {
      if (this.stopping) return undefined;
      const again = this.failing.has(sessionId);
      // A session swept by another sweeper meanwhile is never taken out: bounded, it starts over.
      if (this.failing.size >= MAX_FAILING_REMEMBERED) this.failing.clear();
      this.failing.add(sessionId);
      this.deps.log[again ? "debug" : "warn"](
        { err: error, sessionId },
        again
          ? "sweeping a session failed again"
          : "sweeping a session failed; it is looked at again each tick (logged once until it works)",
      );
      return undefined;
    }
  }
}
