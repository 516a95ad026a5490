/**
 * What a worker knows about its own session lease, from its own monotonic clock alone.
 *
 * The Postgres fence refuses an append once someone advanced the epoch, but a worker that
 * was frozen (SIGSTOP, a GC pause, a partition) can wake up before anyone did, and a tool
 * is a side effect no statement can fence. So before every tool it starts and every write
 * it makes, the worker asks this guard, which answers from memory (no I/O, so the answer
 * cannot wait behind the overdue timers that fire after a freeze): the lease is valid only
 * while `now < sentAt + ttl − margin`, where `sentAt` is the monotonic time at which the
 * last successful acquisition or renewal was *sent*. Redis started the key's TTL after it
 * received that request, so the key cannot have expired earlier (only a sweeper that has
 * declared the holder dead deletes it sooner); the margin absorbs clock rate
 * differences and the time between the check and the act. A renewal answered "no" (the key
 * is someone else's, or the session's epoch moved) invalidates the guard for good. See
 * fleet-design.md §4.
 *
 * Riding out a Redis outage (README, "Redis unreachable"): a guard given `waitMs` makes a
 * write or tool start that finds the lease unproven (lapsed, not lost) wait up to `waitMs`
 * for a renewal to prove it again, instead of stopping the job. A renewal that found the key
 * gone and took it back `suspend`s the guard: nothing is proven until the caller has checked
 * the session's epoch in Postgres (`verified`) — a plain renewal answered meanwhile counts
 * for nothing — or found it moved (`lost`).
 */
import { FencedError } from "../shared/errors.js";
import type { LeaseWaitResult } from "../shared/metrics.js";
import type { Fence } from "../shared/store/fenced-writes.js";

/** The one question the agent loop asks before it acts. */
export type LeaseCheck = {
  assertValid(epoch?: number): void;
  /** Resolves once the lease is proven; throws like `assertValid` when it is lost or the wait ends. */
  whenValid(epoch?: number): Promise<void>;
};

/** Thrown when the lease cannot be proven: a FencedError, so it is handled (and counted) like one. */
export class LeaseLapsedError extends FencedError {
  override name = "LeaseLapsedError";
  constructor(sessionId: string, epoch: number, detail: string) {
    super(sessionId, epoch);
    this.message = `session ${sessionId}: ${detail}; this worker stops and writes nothing more`;
  }
}

export type LeaseGuardOptions = {
  /** Subtracted from the TTL; default 5% of it, at least 25 ms. */
  marginMs?: number;
  /** A monotonic clock in ms; default performance.now (never the wall clock, which can jump). */
  now?: () => number;
  /** How long `whenValid` waits for a lapsed lease to be proven again; default 0 (no wait). */
  waitMs?: number;
  /** Told of every `whenValid` that had to wait: for how long, and how the wait ended. */
  onWaited?: (seconds: number, result: LeaseWaitResult) => void;
};

export class LeaseGuard implements LeaseCheck {
  private validUntil = Number.NEGATIVE_INFINITY;
  private lostAt: number | null = null;
  private lostDetail = "the lease renewal was refused (another holder)";
  /** Taken back after it was gone: proven again only by `verified`. */
  private suspended = false;
  private readonly waiters = new Set<() => void>();
  private readonly marginMs: number;
  private readonly waitMs: number;
  private readonly now: () => number;
  private readonly onWaited: LeaseGuardOptions["onWaited"];

  constructor(
    readonly sessionId: string,
    readonly ttlMs: number,
    options: LeaseGuardOptions = {},
  ) {
    this.marginMs = options.marginMs ?? Math.max(25, Math.floor(ttlMs / 20));
    this.now = options.now ?? (() => performance.now());
    this.waitMs = options.waitMs ?? 0;
    this.onWaited = options.onWaited;
  }

  /** The clock reading to take right before sending an acquisition or renewal. */
  stamp(): number {
    return this.now();
  }

  /** An acquisition or renewal sent at `sentAt` (from `stamp()`) succeeded. */
  confirmed(sentAt: number): void {
    if (this.lostAt !== null || this.suspended) return; // a "no" already heard outweighs any late "yes"
    this.validUntil = Math.max(this.validUntil, sentAt + this.ttlMs - this.marginMs);
    this.wake();
  }

  /**
   * A renewal sent at `sentAt` found the key gone and took it back: whatever was proven
   * before counts for nothing (the key may have vanished early: Redis lost it) until
   * `verified(sentAt)`.
   */
  suspend(): void {
    if (this.lostAt !== null) return;
    this.suspended = true;
    this.validUntil = Number.NEGATIVE_INFINITY;
  }

  /** Whether a taken-back lease awaits its epoch check. */
  isSuspended(): boolean {
    return this.suspended && this.lostAt === null;
  }

  /** The epoch check after a take-back passed: the lease counts from that renewal's send. */
  verified(sentAt: number): void {
    this.suspended = false;
    this.confirmed(sentAt);
  }

  /** A renewal was refused (someone else's key), or the epoch moved: lost for good. */
  lost(detail?: string): void {
    if (this.lostAt === null && detail) this.lostDetail = `the lease renewal was refused (${detail})`;
    this.lostAt ??= this.now();
    this.wake();
  }

  private wake(): void {
    for (const waiter of [...this.waiters]) waiter();
  }

  /** Milliseconds of proven lease left (≤ 0 when none). */
  remainingMs(): number {
    return this.lostAt !== null ? 0 : this.validUntil - this.now();
  }

  isValid(): boolean {
    return this.remainingMs() > 0;
  }

  /** Throws a LeaseLapsedError unless the lease is provably still this worker's. */
  assertValid(epoch = 0): void {
    if (this.lostAt !== null) throw new LeaseLapsedError(this.sessionId, epoch, this.lostDetail);
    if (this.suspended) {
      throw new LeaseLapsedError(
        this.sessionId,
        epoch,
        "the lease cannot be proven: it was gone and taken back, and the session's epoch is not checked yet",
      );
    }
    const now = this.now();
    if (now >= this.validUntil) {
      const age = Math.round(now - (this.validUntil - this.ttlMs + this.marginMs));
      const last = Number.isFinite(age)
        ? `the last confirmed renewal was sent ${age} ms ago`
        : "none confirmed";
      throw new LeaseLapsedError(
        this.sessionId,
        epoch,
        `the lease cannot be proven: ${last} (TTL ${this.ttlMs} ms, margin ${this.marginMs} ms)`,
      );
    }
  }

  /**
   * Resolves at once while the lease is proven. Lapsed (not lost), it waits up to `waitMs`
   * for a renewal to prove it again (Redis unreachable, then back); then throws like
   * `assertValid` when it is lost or still unproven.
   */
  whenValid(epoch = 0): Promise<void> {
    // The common case, asked before every write and tool start: proven now, nothing to wait for.
    if (this.lostAt === null && !this.suspended && this.now() < this.validUntil) return PROVEN;
    return this.waitUntilValid(epoch);
  }

  private async waitUntilValid(epoch: number): Promise<void> {
    const startedAt = this.now();
    const deadline = startedAt + this.waitMs;
    const waits = this.waitMs > 0 && this.lostAt === null && !this.isValid();
    let timedOut = false;
    while (!timedOut && this.lostAt === null && !this.isValid()) {
      const left = deadline - this.now();
      if (left <= 0) break;
      await new Promise<void>((resolve) => {
        const done = () => {
          clearTimeout(timer);
          this.waiters.delete(done);
          resolve();
        };
        const timer = setTimeout(() => {
          timedOut = true;
          done();
        }, left);
        // A wait alone does not keep the process alive: a job its worker's stop gave up on
        // (Redis away, worker.ts) would otherwise hold a program that embeds it up to `waitMs`.
        timer.unref();
        this.waiters.add(done);
      });
    }
    if (waits) {
      const result = this.lostAt !== null ? "lost" : this.isValid() ? "proven" : "timed_out";
      this.onWaited?.((this.now() - startedAt) / 1000, result);
    }
    this.assertValid(epoch);
  }
}

/** What `whenValid` answers while the lease is proven (one settled promise, shared). */
const PROVEN: Promise<void> = Promise.resolve();

/**
 * The session's writes (FencedWrites, or a Pick of it), each refused before it is sent when
 * the guard cannot prove the lease. Every method is a write to the session, so every method
 * is guarded, including ones added later. The epoch in the statement stays the real fence;
 * this refuses earlier, and also covers the claim (a holder whose lease lapsed must not take
 * the epoch back from whoever holds the session now).
 */
export function guardedWrites<W extends object>(writes: W, guard: LeaseCheck): W {
  // One guarded function per method, made at its first use (not one closure per call).
  const made = new Map<PropertyKey, { of: (...args: unknown[]) => unknown; guarded: unknown }>();
  return new Proxy(writes, {
    get(target, property, receiver) {
      const value: unknown = Reflect.get(target, property, receiver);
      if (typeof value !== "function") return value;
      const kept = made.get(property);
      if (kept?.of === value) return kept.guarded;
      const method = value as (...args: unknown[]) => unknown;
      const guarded = (...args: unknown[]): Promise<unknown> => {
        const valid = guard.whenValid(epochOf(args[0]));
        // Proven now (the common case): the write is asked for at once, without an async
        // function and an await around it. Either way it is asked for only once proven.
        if (valid !== PROVEN) return valid.then(() => method.apply(target, args));
        try {
          return Promise.resolve(method.apply(target, args));
        } catch (error) {
          return Promise.reject(error);
        }
      };
      made.set(property, { of: method, guarded });
      return guarded;
    },
  });
}

/** The epoch of a write's first argument when it is a Fence (for the error message). */
function epochOf(arg: unknown): number | undefined {
  const epoch = (arg as Partial<Fence> | null)?.epoch;
  return typeof epoch === "number" ? epoch : undefined;
}
