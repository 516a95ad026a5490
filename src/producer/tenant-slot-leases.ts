/**
 * Places a tenant holds across every API process of the fleet (contracts §10: per-tenant
 * limits), for the bounds that count what is open rather than what was asked:
 * FLEET_RESULTS_MAX_READS_PER_TENANT (tenant-read-slots.ts) and FLEET_SSE_MAX_STREAMS_PER_TENANT
 * (tenant-stream-slots.ts). Each place is a lease in Redis, one
 * sorted set per tenant and kind (member → until when it counts, on Redis's clock): taken
 * atomically only while fewer than the bound count, renewed by the process that holds it every
 * third of its time to live for as long as it is open, and removed when it closes. A process
 * that dies gives nothing back, and its places stop counting once their time to live
 * (LEASE_TTL_MS) has passed, so no count leaks. Before, each API process counted its own: a
 * tenant whose requests a load balancer spread over N processes held N times the bound.
 *
 * When Redis cannot be reached the place is given without it (the process's own bound still
 * applies, the caller's), said once per outage; the renewals put it in Redis once it answers.
 *
 * When Redis loses its data (FLUSHALL, a failover to an empty replica) the leases of places
 * still open are gone, and takes on the empty count would give a tenant its bound again on
 * every process. So a fleet-wide `state` hash carries an `epoch`: a process that has used the
 * leases and finds it missing, or a renewal that finds a lease gone, marks `rebuild` for one
 * time to live, during which a take waits (by then every live holder has put its leases back,
 * and a lease not renewed for that long does not count anyway): a stream or a read opened
 * then starts up to LEASE_TTL_MS later, or is refused if the tenant's places came back full.
 * A fleet's first take finds no epoch too, but no process has used the leases before it:
 * nothing waits.
 */
import { randomUUID } from "node:crypto";
import { setTimeout as sleep } from "node:timers/promises";
import type { Redis } from "ioredis";

/** The kinds of places counted fleet-wide (the `limit` of their 429). */
export type SlotKind = "results_reads" | "event_streams";

/** A place taken (`release` gives it back, once), or refused with how many the tenant holds. */
export type SlotAnswer = { taken: true; release: () => void } | { taken: false; held: number };

// KEYS[1]: the tenant's leases, KEYS[2]: the fleet's lease state. ARGV: member, bound, time
// to live (ms), '1' when this process has used the leases before. Returns -1 when the lease is
// taken, -2 - ms while lost leases may still be put back (ms: how much longer), else the leases
// that count now (the bound or more).
const TAKE = `
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
local ttl = tonumber(ARGV[3])
if redis.call('HSETNX', KEYS[2], 'epoch', tostring(now)) == 1 and ARGV[4] == '1' then
  redis.call('HSET', KEYS[2], 'rebuild', tostring(now + ttl))
end
redis.call('ZREMRANGEBYSCORE', KEYS[1], '-inf', now)
local held = redis.call('ZCARD', KEYS[1])
if held >= tonumber(ARGV[2]) then return held end
local rebuild = tonumber(redis.call('HGET', KEYS[2], 'rebuild') or '0')
if rebuild > now then return -2 - (rebuild - now) end
redis.call('ZADD', KEYS[1], now + ttl, ARGV[1])
redis.call('PEXPIRE', KEYS[1], ttl)
return -1`;

// KEYS[1]: the tenant's leases, KEYS[2]: the fleet's lease state. ARGV: time to live (ms),
// then the members still open. A lease that lapsed meanwhile (Redis unreachable for longer, or
// its data lost) is put back: its place is still held; and other holders' may be missing too,
// so no place is given for one time to live, while they put theirs back.
const RENEW = `
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
local ttl = tonumber(ARGV[1])
local added = 0
for i = 2, #ARGV do added = added + redis.call('ZADD', KEYS[1], now + ttl, ARGV[i]) end
redis.call('PEXPIRE', KEYS[1], ttl)
if added > 0 then
  redis.call('HSETNX', KEYS[2], 'epoch', tostring(now))
  local rebuild = tonumber(redis.call('HGET', KEYS[2], 'rebuild') or '0')
  if now + ttl > rebuild then redis.call('HSET', KEYS[2], 'rebuild', tostring(now + ttl)) end
end
return #ARGV - 1`;

/** How often held leases are renewed, given their time to live (pure): a third of it. */
export function renewEveryMs(ttlMs: number): number {
  return Math.max(50, Math.floor(ttlMs / 3));
}

export type TenantSlotLeasesDeps = {
  redis: Pick<Redis, "eval" | "zrem">;
  prefix: string;
  /** How long a lease counts without being renewed (LEASE_TTL_MS). */
  ttlMs: number;
  /** Told once per Redis outage that places are given on this process's bound alone. */
  onUnavailable?: (error: unknown) => void;
};

export class TenantSlotLeases {
  /** This process's leases start with it: no two processes' members are the same. */
  private readonly owner = randomUUID();
  private next = 0;
  /** The members this process holds, by their tenant's key. */
  private readonly held = new Map<string, Set<string>>();
  private timer: NodeJS.Timeout | undefined;
  private unavailable = false;
  /** Whether Redis has answered a take: an epoch missing after that means it lost its data. */
  private used = false;

  constructor(private readonly deps: TenantSlotLeasesDeps) {}

  private key(kind: SlotKind, tenant: string): string {
    return `${this.deps.prefix}:slots:${kind}:${tenant}`;
  }

  private get stateKey(): string {
    return `${this.deps.prefix}:slots:state`;
  }

  /** A place of `kind` for `tenant` while it holds fewer than `max` across the fleet. */
  async take(kind: SlotKind, tenant: string, max: number): Promise<SlotAnswer> {
    const key = this.key(kind, tenant);
    const member = `${this.owner}:${this.next++}`;
    try {
      // Waits out a rebuild (a few rounds at most: each ends within one time to live).
      for (let round = 0; ; round++) {
        const answer = Number(
          await this.deps.redis.eval(
            TAKE,
            2,
            key,
            this.stateKey,
            member,
            max,
            this.deps.ttlMs,
            this.used ? "1" : "0",
          ),
        );
        this.used = true;
        this.unavailable = false;
        if (answer >= 0) return { taken: false, held: answer };
        if (answer === -1) break;
        if (round >= 3) return { taken: false, held: max };
        await sleep(Math.min(-2 - answer, this.deps.ttlMs) + 20);
      }
    } catch (error) {
      if (!this.unavailable) this.deps.onUnavailable?.(error);
      this.unavailable = true;
    }
    this.hold(key, member);
    let released = false;
    return {
      taken: true,
      release: () => {
        if (released) return;
        released = true;
        this.drop(key, member);
      },
    };
  }

  /** Leases this process holds now (for tests and shutdown). */
  holding(): number {
    let count = 0;
    for (const members of this.held.values()) count += members.size;
    return count;
  }

  /** Stops renewing (the process is stopping): what it held lapses within the time to live. */
  stop(): void {
    clearInterval(this.timer);
    this.timer = undefined;
  }

  private hold(key: string, member: string): void {
    const members = this.held.get(key) ?? new Set<string>();
    members.add(member);
    this.held.set(key, members);
    if (this.timer) return;
    this.timer = setInterval(() => this.renew(), renewEveryMs(this.deps.ttlMs));
    this.timer.unref();
  }

  private drop(key: string, member: string): void {
    const members = this.held.get(key);
    members?.delete(member);
    if (members?.size === 0) this.held.delete(key);
    if (this.held.size === 0) this.stop();
    // Not removed (Redis unreachable): it lapses within the time to live.
    this.deps.redis.zrem(key, member).catch(() => undefined);
  }

  /**
   * Renews every lease held. Each renewal is sent before this returns, so a release after it
   * (ZREM on the same connection) is applied after it and is not undone.
   */
  private renew(): void {
    for (const [key, members] of this.held)
      this.deps.redis.eval(RENEW, 2, key, this.stateKey, this.deps.ttlMs, ...members).then(
        () => {
          this.unavailable = false;
        },
        (error: unknown) => {
          if (!this.unavailable) this.deps.onUnavailable?.(error);
          this.unavailable = true;
        },
      );
  }
}
