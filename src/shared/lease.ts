/**
 * The per-session lease in Redis: `SET key token NX PX ttl`, renewed and released only by
 * the token's holder (compare-and-set in Lua). It keeps two workers from acting on one
 * session at once; the Postgres epoch (fenced-writes.ts) makes a late holder harmless.
 */
import { randomUUID } from "node:crypto";
import type { Redis } from "ioredis";
import { isCluster } from "./redis.js";
import { type ScriptArg, ScriptCall } from "./script-call.js";
import { keysShareSlot, TurnBatch } from "./turn-batch.js";

// Each script acts on one or more sessions' leases (turn-batch.ts): KEYS per session, ARGV
// shared values first, then one token per session; the answer is one number per session.
// KEYS: per session its lease and its last-renewed key (the holder's last sign of life, for
// fleet_crash_to_resume_seconds). ARGV: ttl, now, tokens.
const RENEW = `local out = {}
for i = 1, #KEYS / 2 do
  if redis.call("get", KEYS[2 * i - 1]) == ARGV[i + 2] then
    redis.call("set", KEYS[2 * i], ARGV[2], "PX", 3600000)
    out[i] = redis.call("pexpire", KEYS[2 * i - 1], ARGV[1])
  else out[i] = 0 end
end
return out`;
// The worker's renewal (`hold`): renews a lease still its own (1); takes back one that is
// gone (2: it expired while Redis was unreachable, or Redis restarted empty), which the
// worker must then verify against the session's epoch in Postgres before it acts again;
// 0 when another token holds it. Same KEYS and ARGV.
const HOLD = `local out = {}
for i = 1, #KEYS / 2 do
  local held = redis.call("get", KEYS[2 * i - 1])
  if held == ARGV[i + 2] then
    redis.call("pexpire", KEYS[2 * i - 1], ARGV[1])
    out[i] = 1
  elseif not held then
    redis.call("set", KEYS[2 * i - 1], ARGV[i + 2], "PX", ARGV[1])
    out[i] = 2
  else out[i] = 0 end
  if out[i] > 0 then redis.call("set", KEYS[2 * i], ARGV[2], "PX", 3600000) end
end
return out`;
// Takes each lease if free, and records the sign of life with it. Same KEYS and ARGV. The
// answer: 0 when held by another; else the sign of life recorded before (ms, the last holder's
// last renewal: a claim that finds its run left running times the resume from it), or 1 if none.
const ACQUIRE = `local out = {}
for i = 1, #KEYS / 2 do
  if redis.call("set", KEYS[2 * i - 1], ARGV[i + 2], "PX", ARGV[1], "NX") then
    local before = tonumber(redis.call("get", KEYS[2 * i]))
    redis.call("set", KEYS[2 * i], ARGV[2], "PX", 3600000)
    out[i] = before or 1
  else out[i] = 0 end
end
return out`;
// KEYS: leases (or locks). ARGV: tokens. Deletes each only if it still holds its token.
const RELEASE = `local out = {}
for i = 1, #KEYS do
  if redis.call("get", KEYS[i]) == ARGV[i] then out[i] = redis.call("del", KEYS[i]) else out[i] = 0 end
end
return out`;

/** Keys per MGET in `holders`: one reply stays small whatever the fleet's size. */
const HOLDERS_PER_MGET = 500;

/** What a worker's renewal found: its own key (renewed), none (taken back), another token's. */
export type LeaseHold = "renewed" | "retaken" | "lost";

/** A lease taken (`take`): its token, and when the holder before last renewed it (ms), if known. */
export type Taken = { token: string; lastRenewal: number | null };

export type LeaseStore = {
  acquire(sessionId: string, ownerId: string): Promise<string | null>;
  /** `acquire`, also answering the previous holder's last renewal; absent: `acquire` only. */
  take?(sessionId: string, ownerId: string): Promise<Taken | null>;
  renew(sessionId: string, token: string): Promise<boolean>;
  /** Renews, or takes back a lease that is gone (see HOLD); absent: `renew` only. */
  hold?(sessionId: string, token: string): Promise<LeaseHold>;
  release(sessionId: string, token: string): Promise<boolean>;
};

/** Deletes `key` only if it still holds `token` (a lease, or the sweeper's per-session lock). */
export async function releaseIfHolder(redis: Redis, key: string, token: string): Promise<boolean> {
  const [deleted] = await RELEASE_CALL.call<number[]>(redis, 1, [key, token]);
  return deleted === 1;
}

type Held = { sessionId: string; token: string };

/**
 * The worker's lease scripts, their commands' bytes written once (script-call.ts) rather than
 * built as ioredis's strings argument by argument: a take, a few renewals and a release a
 * session, each a grouped call of up to 128 sessions' keys and tokens.
 */
const ACQUIRE_CALL = new ScriptCall(ACQUIRE);
const RENEW_CALL = new ScriptCall(RENEW);
const HOLD_CALL = new ScriptCall(HOLD);
const RELEASE_CALL = new ScriptCall(RELEASE);

export class SessionLease implements LeaseStore {
  private readonly redis: Redis;

  /**
   * Acquires, renewals and releases asked for in one turn of the event loop go out in one
   * script call each (a worker starting or ending many sessions at once makes one call).
   */
  private readonly acquires: TurnBatch<Held, number>;
  private readonly renewals: TurnBatch<Held, number>;
  private readonly holds: TurnBatch<Held, number>;
  private readonly releases: TurnBatch<Held, number>;

  constructor(
    redis: Redis,
    private readonly prefix: string,
    /** How long a lease lives without renewal. */
    readonly ttlMs: number,
    /** How long a call waits for others to share its script call (TurnBatch's gatherMs). */
    gatherMs = 0,
  ) {
    this.redis = redis;
    const combine = keysShareSlot(isCluster(redis), prefix);
    // KEYS: each session's lease and last-renewed key; ARGV: ttl, now, then each token.
    const withLife = (script: ScriptCall) => (held: Held[]) => {
      const args: ScriptArg[] = [];
      for (const h of held) args.push(this.key(h.sessionId), this.renewedKey(h.sessionId));
      args.push(this.ttlMs, Date.now());
      for (const h of held) args.push(h.token);
      return script.call<number[]>(this.redis, held.length * 2, args);
    };
    this.acquires = new TurnBatch(withLife(ACQUIRE_CALL), 128, combine, gatherMs);
    this.renewals = new TurnBatch(withLife(RENEW_CALL), 128, combine, gatherMs);
    this.holds = new TurnBatch(withLife(HOLD_CALL), 128, combine, gatherMs);
    this.releases = new TurnBatch(
      (held) => {
        const args: ScriptArg[] = [];
        for (const h of held) args.push(this.key(h.sessionId));
        for (const h of held) args.push(h.token);
        return RELEASE_CALL.call<number[]>(this.redis, held.length, args);
      },
      128,
      combine,
      gatherMs,
    );
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
    return (await this.take(sessionId, ownerId))?.token ?? null;
  }

  /** `acquire`, with the last renewal recorded before it took the lease (null: none). */
  async take(sessionId: string, ownerId: string): Promise<Taken | null> {
    const token = `${ownerId}/${randomUUID()}`;
    const answer = Number(await this.acquires.call({ sessionId, token }));
    if (answer === 0) return null;
    return { token, lastRenewal: answer === 1 ? null : answer };
  }

  async renew(sessionId: string, token: string): Promise<boolean> {
    return (await this.renewals.call({ sessionId, token })) === 1;
  }

  /**
   * The worker's renewal: renews its lease, or takes it back when the key is gone
   * ("retaken": the caller must check the session's epoch before acting on it again).
   */
  async hold(sessionId: string, token: string): Promise<LeaseHold> {
    const answer = await this.holds.call({ sessionId, token });
    return answer === 1 ? "renewed" : answer === 2 ? "retaken" : "lost";
  }

  /**
   * The sweeper's hold while it ends a run whose lease is gone: `SET NX` with a token of its
   * own, so a worker taking its lease back (`hold`) and the sweeper ending its run cannot
   * both go ahead. Returns the token, or null when someone holds the lease.
   */
  async seize(sessionId: string, ownerId: string): Promise<string | null> {
    const token = `${ownerId}/${randomUUID()}`;
    const ok = await this.redis.set(this.key(sessionId), token, "PX", this.ttlMs, "NX");
    return ok === "OK" ? token : null;
  }

  /** When the session's lease holder last renewed or took it (ms since epoch), if known. */
  async lastRenewal(sessionId: string): Promise<number | null> {
    const value = await this.redis.get(this.renewedKey(sessionId));
    return value ? Number(value) : null;
  }

  /** Releases the lease only if `token` still holds it (also the sweeper's, for a dead holder). */
  async release(sessionId: string, token: string): Promise<boolean> {
    return (await this.releases.call({ sessionId, token })) === 1;
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
