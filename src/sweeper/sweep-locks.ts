/**
 * A session's sweep lock: the short Redis lock a sweeper holds while it acts on one session,
 * so that of several sweepers one acts at a time. Its token starts with its holder's
 * connection name (`sweeperName`), so a lock left by a killed sweeper is taken over as soon as
 * that name is confirmed gone from CLIENT LIST (the kernel closed its socket), not after the
 * lock's TTL. A frozen sweeper stays listed and keeps its locks until it wakes or they expire.
 */
import { randomUUID } from "node:crypto";
import type { Redis } from "ioredis";
import type { Logger } from "pino";
import { releaseIfHolder } from "../shared/lease.js";
import { DeathWatch, liveSweepers, sweeperName } from "./liveness.js";

/** How long a session's sweep lock lasts when its holder neither releases it nor is seen dead. */
export const SWEEP_LOCK_MS = 10_000;

/** A sweep lock's token: its holder's connection name (when it has one), then a random part. */
export function sweepLockToken(name: string | undefined): string {
  return `${name ?? process.pid} ${randomUUID()}`;
}

/** How long a look at the connected sweepers is trusted for a holder it listed. */
const LIVE_SWEEPERS_FRESH_MS = 1_000;

/** Dead sweepers remembered while their death is confirmed (then the memory starts over). */
const MAX_MISSING_SWEEPERS = 1_000;

export type SweepLockDeps = {
  prefix: string;
  redis: Redis;
  /** This sweeper's connection name (`sweeperName`); absent: its locks only expire, and it takes over none. */
  name?: string;
  log: Pick<Logger, "info">;
  now: () => number;
  /** How far apart two looks must be that both miss a holder before it counts as dead. */
  confirmDeathMs: number;
  /** False while this sweeper's own Redis was in trouble lately: every connection may be reconnecting. */
  judgeable: () => boolean;
  /** Runs a Redis request, noting trouble when it fails or answers late. */
  timed: <T>(request: () => Promise<T>) => Promise<T>;
};

export class SweepLocks {
  private readonly deadSweepers: DeathWatch;
  /** The sweepers connected at the last look (null: CLIENT LIST refused), and when it was read. */
  private seen: { at: number; names: Set<string> | null } | null = null;

  constructor(private readonly deps: SweepLockDeps) {
    this.deadSweepers = new DeathWatch(deps.confirmDeathMs, MAX_MISSING_SWEEPERS);
  }

  key(sessionId: string): string {
    return `${this.deps.prefix}:sweep-lock:${sessionId}`;
  }

  /** Forget what was seen of other sweepers (after this sweeper's Redis came back). */
  reset(): void {
    this.deadSweepers.reset();
    this.seen = null;
  }

  /**
   * Runs `fn` while holding the session's sweep lock; skips (undefined) when another sweeper
   * holds it, unless that sweeper is dead (`holderDead`): its lock is then removed and taken.
   */
  async withLock<T>(sessionId: string, fn: () => Promise<T>): Promise<T | undefined> {
    const { redis, log } = this.deps;
    const key = this.key(sessionId);
    const token = sweepLockToken(this.deps.name);
    const take = () => redis.set(key, token, "PX", SWEEP_LOCK_MS, "NX");
    let ok = await take();
    if (ok !== "OK") {
      const held = await redis.get(key);
      if (held === null || !(await this.holderDead(held))) return undefined;
      if (!(await releaseIfHolder(redis, key, held))) return undefined;
      log.info({ sessionId, holder: held.split(" ")[0] }, "sweep lock of a dead sweeper taken over");
      ok = await take();
      if (ok !== "OK") return undefined;
    }
    try {
      return await fn();
    } finally {
      await releaseIfHolder(redis, key, token).catch(() => {});
    }
  }

  /**
   * Whether a sweep lock's holder (the name its token starts with) is a sweeper missing from
   * CLIENT LIST in two looks at least `confirmDeathMs` apart: killed, not reconnecting. Never
   * while this sweeper's own Redis was in trouble lately, nor where CLIENT LIST is refused,
   * nor for a token without a sweeper's name, nor when this sweeper has no name itself.
   */
  private async holderDead(token: string): Promise<boolean> {
    const { name, prefix, redis, confirmDeathMs } = this.deps;
    if (name === undefined) return false;
    const holder = token.split(" ")[0]!;
    if (!holder.startsWith(sweeperName(prefix, ""))) return false;
    if (!this.deps.judgeable()) return false;
    // One CLIENT LIST serves the locks met within half a confirmation period, or within
    // LIVE_SWEEPERS_FRESH_MS when it listed their holder: two sweepers meet each other's locks
    // at every burst of crashes, and CLIENT LIST is most of a tick's cost on a large fleet.
    const now = this.deps.now();
    let seen = this.seen;
    const freshFor = seen?.names?.has(holder) ? LIVE_SWEEPERS_FRESH_MS : confirmDeathMs / 2;
    if (seen === null || now - seen.at >= freshFor) {
      seen = { at: now, names: await this.deps.timed(() => liveSweepers(redis, prefix)) };
      this.seen = seen;
    }
    if (seen.names === null) return false;
    return this.deadSweepers.observeOne(holder, seen.names.has(holder), seen.at);
  }
}
