/**
 * The per-session lease in Redis: `SET key token NX PX ttl`, renewed and released only by
 * the token's holder (compare-and-set in Lua). It keeps two workers from acting on one
 * session at once; the Postgres epoch (fenced-writes.ts) makes a late holder harmless.
 */
import { randomUUID } from "node:crypto";
import type { Redis } from "ioredis";

// KEYS[2] records when the holder last showed a sign of life (for fleet_crash_to_resume_seconds).
const RENEW = `if redis.call("get", KEYS[1]) == ARGV[1] then
  redis.call("set", KEYS[2], ARGV[3], "PX", 3600000)
  return redis.call("pexpire", KEYS[1], ARGV[2])
else return 0 end`;
// One round trip: take the lease if free, and record the sign of life with it.
const ACQUIRE = `if redis.call("set", KEYS[1], ARGV[1], "PX", ARGV[2], "NX") then
  redis.call("set", KEYS[2], ARGV[3], "PX", 3600000)
  return 1
else return 0 end`;
const RELEASE = `if redis.call("get", KEYS[1]) == ARGV[1] then return redis.call("del", KEYS[1]) else return 0 end`;

/** Keys per MGET in `holders`: one reply stays small whatever the fleet's size. */
const HOLDERS_PER_MGET = 500;

export type LeaseStore = {
  acquire(sessionId: string, ownerId: string): Promise<string | null>;
  renew(sessionId: string, token: string): Promise<boolean>;
  release(sessionId: string, token: string): Promise<boolean>;
};

/** The scripts as ioredis commands: sent once, then called by SHA (EVALSHA) on every use. */
type LeaseCommands = {
  fleetLeaseAcquire(
    key: string,
    renewedKey: string,
    token: string,
    ttl: string,
    now: string,
  ): Promise<number>;
  fleetLeaseRenew(key: string, renewedKey: string, token: string, ttl: string, now: string): Promise<number>;
  fleetReleaseIfHolder(key: string, token: string): Promise<number>;
};

const defined = new WeakSet<Redis>();

function commands(redis: Redis): Redis & LeaseCommands {
  if (!defined.has(redis)) {
    redis.defineCommand("fleetLeaseAcquire", { numberOfKeys: 2, lua: ACQUIRE });
    redis.defineCommand("fleetLeaseRenew", { numberOfKeys: 2, lua: RENEW });
    redis.defineCommand("fleetReleaseIfHolder", { numberOfKeys: 1, lua: RELEASE });
    defined.add(redis);
  }
  return redis as Redis & LeaseCommands;
}

/** Deletes `key` only if it still holds `token` (a lease, or the sweeper's per-session lock). */
export async function releaseIfHolder(redis: Redis, key: string, token: string): Promise<boolean> {
  return (await commands(redis).fleetReleaseIfHolder(key, token)) === 1;
}

export class SessionLease implements LeaseStore {
  private readonly redis: Redis & LeaseCommands;

  constructor(
    redis: Redis,
    private readonly prefix: string,
    /** How long a lease lives without renewal. */
    readonly ttlMs: number,
  ) {
    this.redis = commands(redis);
  }

  key(sessionId: string): string {
    return `${this.prefix}:lease:${sessionId}`;
  }

  renewedKey(sessionId: string): string {
    return `${this.prefix}:lease-renewed:${sessionId}`;
  }

  /**
   * Returns a token when the lease was free, null when someone holds it. The token starts
   * with the owner's id, so the sweeper can tell whose lease it is (`ownerOf`).
   */
  async acquire(sessionId: string, ownerId: string): Promise<string | null> {
    const token = `${ownerId}/${randomUUID()}`;
    const ok = await this.redis.fleetLeaseAcquire(
      this.key(sessionId),
      this.renewedKey(sessionId),
      token,
      String(this.ttlMs),
      String(Date.now()),
    );
    return ok === 1 ? token : null;
  }

  async renew(sessionId: string, token: string): Promise<boolean> {
    const result = await this.redis.fleetLeaseRenew(
      this.key(sessionId),
      this.renewedKey(sessionId),
      token,
      String(this.ttlMs),
      String(Date.now()),
    );
    return result === 1;
  }

  /** When the session's lease holder last renewed or took it (ms since epoch), if known. */
  async lastRenewal(sessionId: string): Promise<number | null> {
    const value = await this.redis.get(this.renewedKey(sessionId));
    return value ? Number(value) : null;
  }

  /** Releases the lease only if `token` still holds it (also the sweeper's, for a dead holder). */
  async release(sessionId: string, token: string): Promise<boolean> {
    return releaseIfHolder(this.redis, this.key(sessionId), token);
  }

  /**
   * Who holds each session's lease, in one MGET per 500 sessions (the sweeper reads every
   * running run's lease each tick). Every fleet key shares one hash tag on a Redis Cluster
   * (redis.ts), so the keys of one MGET are always on one node.
   */
  async holders(sessionIds: readonly string[]): Promise<(string | null)[]> {
    const out: (string | null)[] = [];
    for (let i = 0; i < sessionIds.length; i += HOLDERS_PER_MGET) {
      const keys = sessionIds.slice(i, i + HOLDERS_PER_MGET).map((id) => this.key(id));
      out.push(...(await this.redis.mget(...keys)));
    }
    return out;
  }

  /** Who holds the lease (its token), for the sweeper and tests. */
  async holder(sessionId: string): Promise<string | null> {
    return this.redis.get(this.key(sessionId));
  }
}

/** The worker id a lease token belongs to. */
export function ownerOf(token: string): string {
  const slash = token.indexOf("/");
  return slash < 0 ? token : token.slice(0, slash);
}
