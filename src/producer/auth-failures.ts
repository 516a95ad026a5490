/**
 * Failed authentications per client address (FLEET_API_AUTH_FAILURES_PER_MINUTE,
 * FLEET_API_AUTH_FAILURE_BURST): without a bound, every made-up API key cost one Postgres
 * look-up, as often as a caller could send them. Each client may fail `burst` times at once,
 * then `perMinute` times a minute (a token bucket per address, in this process's memory);
 * past that its requests answer 429 with Retry-After before any look-up — except those
 * with a key that was valid lately (auth.ts `recognises`), so a tenant behind the same
 * address as a key guesser keeps working. Successful requests cost nothing here.
 *
 * Memory is bounded: at most `maxClients` addresses are tracked; a bucket that has refilled
 * is forgotten; when every slot holds a client still short of tokens, new addresses share
 * one bucket, so spreading guesses over many addresses buys no more than one client gets.
 * IPv6 clients count by their /64 (one host usually holds a whole /64).
 *
 * A look-up in flight holds a place in its client's count until it is answered (`begin`):
 * each request was checked against the count before any look-up of its had failed, so
 * guesses sent at once were all looked up (60 against a burst of 5:
 * test/auth-failures-concurrent.test.ts). Requests at once with the same credentials hold one
 * place (ApiAuth looks their key up once), so a tenant's burst with its key is not refused.
 */
import { isIP } from "node:net";

export type AuthFailureLimit = { perMinute: number; burst: number };

/** Addresses tracked at most (about 100 bytes each). */
export const MAX_TRACKED_CLIENTS = 10_000;
/** The bucket new addresses share while every slot is taken. */
const OVERFLOW = "*";

type Bucket = { tokens: number; at: number };

/** The key a client's failures count under: an IPv4 address, or an IPv6 address's /64. */
export function clientKey(ip: string): string {
  const mapped = /^::ffff:(\d+\.\d+\.\d+\.\d+)$/i.exec(ip);
  if (mapped) return mapped[1]!;
  if (isIP(ip) !== 6) return ip;
  const [head = "", tail = ""] = ip.toLowerCase().split("::");
  const left = head === "" ? [] : head.split(":");
  const right = tail === "" ? [] : tail.split(":");
  const groups = ip.includes("::")
    ? [...left, ...Array(8 - left.length - right.length).fill("0"), ...right]
    : left;
  return `${groups
    .slice(0, 4)
    .map((g) => Number.parseInt(g || "0", 16).toString(16))
    .join(":")}::/64`;
}

/** A bucket's tokens at `now` (refilled at `perMs` a millisecond, up to `burst`). */
export function tokensAt(bucket: Bucket, now: number, limit: AuthFailureLimit): number {
  return Math.min(limit.burst, bucket.tokens + (Math.max(0, now - bucket.at) * limit.perMinute) / 60_000);
}

/** Whole seconds until a bucket with `tokens` holds one (0: it holds one now). */
export function secondsUntilToken(tokens: number, limit: AuthFailureLimit): number {
  if (tokens >= 1) return 0;
  return Math.max(1, Math.ceil(((1 - tokens) * 60) / limit.perMinute));
}

export class AuthFailureLimiter {
  private readonly buckets = new Map<string, Bucket>();
  /** Per bucket, the credentials being looked up for its clients, and how many requests wait on each. */
  private readonly pending = new Map<string, Map<string, number>>();
  private readonly now: () => number;
  private readonly maxClients: number;

  constructor(
    readonly limit: AuthFailureLimit,
    options: { now?: () => number; maxClients?: number } = {},
  ) {
    this.now = options.now ?? Date.now;
    this.maxClients = options.maxClients ?? MAX_TRACKED_CLIENTS;
  }

  /** How many addresses are tracked now (for tests and figures). */
  get size(): number {
    return this.buckets.size;
  }

  /** Seconds the client at `ip` must wait before another request of it may fail; 0: none. */
  retryAfter(ip: string): number {
    const key = this.slot(clientKey(ip), false);
    const bucket = this.buckets.get(key);
    const tokens = bucket ? tokensAt(bucket, this.now(), this.limit) : this.limit.burst;
    return secondsUntilToken(tokens - (this.pending.get(key)?.size ?? 0), this.limit);
  }

  /**
   * Holds a place in the count of the client at `ip` while `credentials` are looked up (one
   * place for all its requests with the same credentials); the returned function gives it back
   * once the look-up is answered (then `failed`, if it failed).
   */
  begin(ip: string, credentials: string): () => void {
    const key = this.slot(clientKey(ip), false);
    const waiting = this.pending.get(key) ?? new Map<string, number>();
    this.pending.set(key, waiting);
    waiting.set(credentials, (waiting.get(credentials) ?? 0) + 1);
    let done = false;
    return () => {
      if (done) return;
      done = true;
      const left = (waiting.get(credentials) ?? 1) - 1;
      if (left > 0) waiting.set(credentials, left);
      else waiting.delete(credentials);
      if (waiting.size === 0 && this.pending.get(key) === waiting) this.pending.delete(key);
    };
  }

  /** Counts one failed authentication of the client at `ip`. */
  failed(ip: string): void {
    const now = this.now();
    const key = this.slot(clientKey(ip), true);
    const bucket = this.buckets.get(key);
    const tokens = bucket ? tokensAt(bucket, now, this.limit) : this.limit.burst;
    // Most recently failed last: the oldest, most likely refilled, are looked at first.
    this.buckets.delete(key);
    this.buckets.set(key, { tokens: Math.max(0, tokens - 1), at: now });
  }

  /** The bucket `key` counts in: its own, or (no slot left for a new one) the shared one. */
  private slot(key: string, making: boolean): string {
    if (this.buckets.has(key)) return key;
    if (this.buckets.size < this.maxClients) return key;
    if (making) this.forgetRefilled();
    return this.buckets.size < this.maxClients ? key : OVERFLOW;
  }

  /** Forgets the buckets that have refilled (as good as none), oldest failure first. */
  private forgetRefilled(): void {
    const now = this.now();
    for (const [key, bucket] of this.buckets) {
      if (key === OVERFLOW) continue;
      if (tokensAt(bucket, now, this.limit) < this.limit.burst) break;
      this.buckets.delete(key);
    }
  }
}
