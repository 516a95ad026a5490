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
 */
import { randomUUID } from "node:crypto";
import type { Redis } from "ioredis";

/** The kinds of places counted fleet-wide (the `limit` of their 429). */
export type SlotKind = "results_reads" | "event_streams";

/** A place taken (`release` gives it back, once), or refused with how many the tenant holds. */
export type SlotAnswer = { taken: true; release: () => void } | { taken: false; held: number };

// KEYS[1]: the tenant's leases. ARGV: member, bound, time to live (ms). Returns -1 when the
// lease is taken, else the leases that count now (the bound or more).
const TAKE = `
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
local ttl = tonumber(ARGV[3])
redis.call('ZREMRANGEBYSCORE', KEYS[1], '-inf', now)
local held = redis.call('ZCARD', KEYS[1])
if held >= tonumber(ARGV[2]) then return held end
redis.call('ZADD', KEYS[1], now + ttl, ARGV[1])
redis.call('PEXPIRE', KEYS[1], ttl)
return -1`;

// KEYS[1]: the tenant's leases. ARGV: time to live (ms), then the members still open. A lease
// that lapsed meanwhile (Redis unreachable for longer) is put back: its place is still held.
const RENEW = `
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
local ttl = tonumber(ARGV[1])
for i = 2, #ARGV do redis.call('ZADD', KEYS[1], now + ttl, ARGV[i]) end
redis.call('PEXPIRE', KEYS[1], ttl)
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

  constructor(private readonly deps: TenantSlotLeasesDeps) {}

  private key(kind: SlotKind, tenant: string): string {
    return `${this.deps.prefix}:slots:${kind}:${tenant}`;
  }

  /** A place of `kind` for `tenant` while it holds fewer than `max` across the fleet. */
  async take(kind: SlotKind, tenant: string, max: number): Promise<SlotAnswer> {
    const key = this.key(kind, tenant);
    const member = `${this.owner}:${this.next++}`;
    try {
      const held = Number(await this.deps.redis.eval(TAKE, 1, key, member, max, this.deps.ttlMs));
      this.unavailable = false;
      if (held >= 0) return { taken: false, held };
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
      this.deps.redis.eval(RENEW, 1, key, this.deps.ttlMs, ...members).then(
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
