/**
 * A tenant's request rate (contracts §10, FLEET_TENANT_REQUESTS_PER_SECOND and
 * FLEET_TENANT_REQUEST_BURST), shared by every API process of the fleet: the generic cell
 * rate algorithm on one Redis key per tenant, on Redis's clock. A tenant may send `burst`
 * requests at once, then `perSecond` a second; a request beyond that is refused with the
 * time until it would fit. When Redis cannot be reached the limit is not applied (the
 * request goes on and fails on its own if it needs Redis), so a Redis blip never turns
 * reads into 429s.
 */
import type { Redis } from "ioredis";
import { TooManyRequestsError } from "../shared/errors.js";

export type RequestRate = { perSecond: number; burst: number };

// KEYS[1]: the tenant's key. ARGV: emission interval (ms), burst. Returns 0 when admitted,
// else the milliseconds to wait. The key holds the theoretical arrival time (TAT), in ms.
const ADMIT = `
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
local interval = tonumber(ARGV[1])
local window = interval * tonumber(ARGV[2])
local tat = tonumber(redis.call('GET', KEYS[1]) or '0')
if tat < now then tat = now end
local next = tat + interval
if next - now > window then return math.ceil(next - now - window) end
redis.call('SET', KEYS[1], next, 'PX', math.ceil(next - now) + 1)
return 0`;

export class RequestRateLimiter {
  private readonly interval: number;

  constructor(
    private readonly deps: {
      redis: Pick<Redis, "eval">;
      prefix: string;
      rate: RequestRate;
      /** Told once per Redis outage that the limit is not applied. */
      onUnavailable?: (error: unknown) => void;
    },
  ) {
    this.interval = 1000 / deps.rate.perSecond;
  }

  private unavailable = false;

  /** Resolves when `tenant` may make a request now; throws TooManyRequestsError otherwise. */
  async admit(tenant: string): Promise<void> {
    let waitMs: number;
    try {
      const key = `${this.deps.prefix}:rate:${tenant}`;
      waitMs = Number(await this.deps.redis.eval(ADMIT, 1, key, this.interval, this.deps.rate.burst));
      this.unavailable = false;
    } catch (error) {
      if (!this.unavailable) this.deps.onUnavailable?.(error);
      this.unavailable = true;
      return;
    }
    if (waitMs <= 0) return;
    const { perSecond, burst } = this.deps.rate;
    throw new TooManyRequestsError(
      "request_rate",
      Math.max(1, Math.ceil(waitMs / 1000)),
      `tenant "${tenant}" may make ${perSecond} requests a second (bursts of ${burst}; FLEET_TENANT_REQUESTS_PER_SECOND); try again in ${Math.ceil(waitMs)} ms`,
    );
  }
}
