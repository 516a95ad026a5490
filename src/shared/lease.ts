/**
 * The per-session lease in Redis: `SET key token NX PX ttl`, renewed and released only by
 * the token's holder (compare-and-set in Lua). It keeps two workers from acting on one
 * session at once; the Postgres epoch (fenced-writes.ts) makes a late holder harmless.
 */
import { randomUUID } from "node:crypto";
import type { Redis } from "ioredis";

const RENEW = `if redis.call("get", KEYS[1]) == ARGV[1] then return redis.call("pexpire", KEYS[1], ARGV[2]) else return 0 end`;
const RELEASE = `if redis.call("get", KEYS[1]) == ARGV[1] then return redis.call("del", KEYS[1]) else return 0 end`;

export type LeaseStore = {
  acquire(sessionId: string): Promise<string | null>;
  renew(sessionId: string, token: string): Promise<boolean>;
  release(sessionId: string, token: string): Promise<boolean>;
};

export class SessionLease implements LeaseStore {
  constructor(
    private readonly redis: Redis,
    private readonly prefix: string,
    /** How long a lease lives without renewal. */
    readonly ttlMs: number,
  ) {}

  key(sessionId: string): string {
    return `${this.prefix}:lease:${sessionId}`;
  }

  /** Returns a token when the lease was free, null when someone holds it. */
  async acquire(sessionId: string): Promise<string | null> {
    const token = randomUUID();
    const ok = await this.redis.set(this.key(sessionId), token, "PX", this.ttlMs, "NX");
    return ok === "OK" ? token : null;
  }

  async renew(sessionId: string, token: string): Promise<boolean> {
    return (await this.redis.eval(RENEW, 1, this.key(sessionId), token, String(this.ttlMs))) === 1;
  }

  async release(sessionId: string, token: string): Promise<boolean> {
    return (await this.redis.eval(RELEASE, 1, this.key(sessionId), token)) === 1;
  }

  /** Who holds the lease (its token), for the sweeper and tests. */
  async holder(sessionId: string): Promise<string | null> {
    return this.redis.get(this.key(sessionId));
  }
}
