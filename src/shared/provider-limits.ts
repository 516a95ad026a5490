/**
 * Provider limits across the fleet (contracts §15): one Redis state per declared endpoint,
 * shared by every worker, changed only by the Lua scripts below (each runs atomically, on
 * Redis's clock, so workers' clocks never matter).
 *
 * - Requests per minute and tokens per minute: GCRA (a theoretical arrival time, `tat`, per
 *   limit). A request is granted a slot at most `maxWaitMs` ahead, and reserves it: the
 *   worker sleeps until then and sends. Tokens are estimated before the request and the
 *   estimate is corrected by the usage that comes back (`correct`).
 * - Concurrency: a sorted set of permits scored by their expiry, each named after its tenant.
 *   A worker renews its permit while the response streams; a SIGKILLed worker's permits
 *   expire after `permitTtlMs`. Tenants with requests waiting share `maxConcurrent` by
 *   weight: a permit that frees while a tenant below its share waits is kept for that
 *   tenant, not taken by whichever request of a big backlog asks first. The waiting
 *   requests are a sorted set (`:waiting`, member `tenant|request`, scored with when it
 *   stops counting): a request joins it when it is denied, and leaves it when it is granted,
 *   when its waiter gives up (`forget`: its run cancelled or aborted while it waited), or by
 *   itself `maxWaitMs` after its place came without it asking again (its worker was killed,
 *   its job was lost): a tenant counts as waiting exactly while one of its requests does.
 * - A 429/529/overloaded answer pauses the endpoint for every worker (`pause`) until the time
 *   it asked for: no slot is granted before it, and a request granted earlier is not sent
 *   once it is recorded (`confirm`, asked right before each request leaves).
 * - A request that cannot get a slot within `maxWaitMs` is denied with a time to come back.
 *   That time is a place on its tenant's calendar (`due:<tenant>`): one tenant's k-th
 *   waiting request comes back about k × interval × (sum of backlogged tenants' weights /
 *   its weight) from now — weighted fair queueing of returns (FLEET_TENANT_SHARES). A
 *   tenant with no backlog (a single interactive session) is eligible at once and gets the
 *   next slot: it waits at most about `maxWaitMs`, whatever another tenant has queued.
 *   Newcomers of a tenant with a backlog join the end of that tenant's calendar, so they do
 *   not jump ahead of its requests already waiting; and a tenant with a backlog books slots
 *   only `maxWaitMs / 2` ahead, so a slot within `maxWaitMs` is always left for the others.
 */
import { randomUUID } from "node:crypto";
import type { Redis } from "ioredis";
import { z } from "zod";
import { ValidationError } from "./errors.js";

export type EndpointLimits = {
  requestsPerMinute?: number;
  tokensPerMinute?: number;
  maxConcurrent?: number;
};

const positiveInt = z
  .number({ error: "must be a positive integer" })
  .int("must be a positive integer")
  .positive("must be a positive integer");

/** The `limits` of an endpoint in FLEET_MODEL_ENDPOINTS (contracts §15). */
export const endpointLimitsSchema = z.strictObject({
  requestsPerMinute: positiveInt.optional(),
  tokensPerMinute: positiveInt.optional(),
  maxConcurrent: positiveInt.optional(),
});

/** Whether an endpoint declares any limit. */
export function hasLimits(limits: EndpointLimits | undefined): limits is EndpointLimits {
  return (
    limits !== undefined &&
    (limits.requestsPerMinute !== undefined ||
      limits.tokensPerMinute !== undefined ||
      limits.maxConcurrent !== undefined)
  );
}

/** FLEET_TENANT_SHARES: `{"tenant": weight, ...}`; a tenant not named has weight 1. */
export type TenantShares = ReadonlyMap<string, number>;

export function parseTenantShares(value: string | undefined, variable = "FLEET_TENANT_SHARES"): TenantShares {
  const shares = new Map<string, number>();
  if (value === undefined || value.trim() === "") return shares;
  let json: unknown;
  try {
    json = JSON.parse(value);
  } catch (error) {
    throw new ValidationError(variable, `is not valid JSON: ${(error as Error).message}`);
  }
  if (typeof json !== "object" || json === null || Array.isArray(json))
    throw new ValidationError(variable, 'must be a JSON object { "TENANT": weight, ... }');
  for (const [tenant, weight] of Object.entries(json)) {
    if (typeof weight !== "number" || !Number.isFinite(weight) || weight <= 0 || weight > 1_000_000)
      throw new ValidationError(`${variable}.${tenant}`, "must be a number above 0 (a weight; default 1)");
    shares.set(tenant, weight);
  }
  return shares;
}

export function shareOf(shares: TenantShares, tenant: string): number {
  return shares.get(tenant) ?? 1;
}

/** How a gate behaves; every field has a default. */
export type GateTuning = {
  /** The longest a request waits in the worker for its slot; beyond, the job is handed back. Default 2 s. */
  maxWaitMs: number;
  /** How long a concurrency permit lives without renewal (a dead worker's permits free after it). Default 15 s. */
  permitTtlMs: number;
  /** The pause after a 429/529/overloaded answer that says nothing of when to come back. Default 5 s. */
  defaultPauseMs: number;
  /** The longest pause a provider may ask for. Default 10 min. */
  maxPauseMs: number;
  /** Tokens a response is assumed to add before its usage is known. Default 256. */
  expectedOutputTokens: number;
};

export const DEFAULT_GATE_TUNING: GateTuning = {
  maxWaitMs: 2_000,
  permitTtlMs: 15_000,
  defaultPauseMs: 5_000,
  maxPauseMs: 600_000,
  expectedOutputTokens: 256,
};

/**
 * KEYS: 1 state hash, 2 permits (zset: member → expiry), 3 tenants (zset: tenant → last seen),
 * 4 the request's calendar place (string: due time), 5 waiting requests (zset: `tenant|request`
 * → until when it counts).
 * ARGV: 1 member (the permit), 2 tenant, 3 weight, 4 maxWaitMs, 5 ms per request (0: no
 * limit), 6 ms per token (0: no limit), 7 estimated tokens, 8 max concurrent (0: no limit),
 * 9 permit ttl, 10 the request.
 * Returns {1, wait before sending, 0} granted, or {0, ms until its place comes, reason} denied
 * (reason 1: rate or pause, 2: concurrency).
 */
const ACQUIRE = `
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
local member, tenant, weight = ARGV[1], ARGV[2], tonumber(ARGV[3])
local maxWait, T, tau = tonumber(ARGV[4]), tonumber(ARGV[5]), tonumber(ARGV[6])
local cost, maxConc, ttl = tonumber(ARGV[7]), tonumber(ARGV[8]), tonumber(ARGV[9])
local waiter = tenant .. '|' .. ARGV[10]
redis.call('ZADD', KEYS[3], now, tenant)
redis.call('HSET', KEYS[1], 'w:' .. tenant, weight)
for _, idle in ipairs(redis.call('ZRANGEBYSCORE', KEYS[3], '-inf', now - 120000)) do
  redis.call('ZREM', KEYS[3], idle)
  redis.call('HDEL', KEYS[1], 'w:' .. idle, 'due:' .. idle, 'q:' .. idle, 'wait:' .. idle)
end
-- Waiting requests whose place came maxWait ago without them asking again are gone.
redis.call('ZREMRANGEBYSCORE', KEYS[5], '-inf', now)
local pause = tonumber(redis.call('HGET', KEYS[1], 'pause') or '0')
local tat = tonumber(redis.call('HGET', KEYS[1], 'tat') or '0')
local toktat = tonumber(redis.call('HGET', KEYS[1], 'toktat') or '0')
local slot = now
if pause > slot then slot = pause end
if T > 0 and tat > slot then slot = tat end
if tau > 0 and toktat > slot then slot = toktat end
local concOk = true
if maxConc > 0 then
  redis.call('ZREMRANGEBYSCORE', KEYS[2], '-inf', now)
  local permits = redis.call('ZRANGE', KEYS[2], 0, -1)
  local free = maxConc - #permits
  concOk = free > 0
  if concOk then
    -- Shares of the permits: tenants with requests waiting (denied within maxWait) split
    -- maxConcurrent by weight, and a free permit is kept for those below their share.
    local held = {}
    for _, m in ipairs(permits) do
      local u = string.match(m, '^([^|]+)|')
      if u then held[u] = (held[u] or 0) + 1 end
    end
    local total, others = weight, {}
    for _, m in ipairs(redis.call('ZRANGE', KEYS[5], 0, -1)) do
      local u = string.match(m, '^([^|]+)|')
      if u and u ~= tenant and not others[u] then
        local w = tonumber(redis.call('HGET', KEYS[1], 'w:' .. u) or '1')
        total = total + w
        others[u] = w
      end
    end
    if (held[tenant] or 0) >= maxConc * weight / total then
      local owed = 0
      for u, w in pairs(others) do
        owed = owed + math.max(0, math.ceil(maxConc * w / total - (held[u] or 0)))
      end
      concOk = free > owed
    end
  end
end
local mydue = tonumber(redis.call('GET', KEYS[4]) or 'nil')
local calNext = tonumber(redis.call('HGET', KEYS[1], 'due:' .. tenant) or '0')
local eligible
if mydue then eligible = mydue <= now + maxWait else eligible = calNext <= now + maxWait end
-- A tenant with a backlog books slots only half as far ahead: the rest is room for a tenant
-- without one, whose request then gets a slot within maxWait instead of being handed back.
local horizon = maxWait
if calNext > now then horizon = maxWait / 2 end
if eligible and concOk and slot - now <= horizon then
  if T > 0 then redis.call('HSET', KEYS[1], 'tat', tostring(slot + T)) end
  if tau > 0 then redis.call('HSET', KEYS[1], 'toktat', tostring(slot + cost * tau)) end
  if maxConc > 0 then redis.call('ZADD', KEYS[2], now + (slot - now) + ttl, member) end
  redis.call('ZREM', KEYS[5], waiter)
  redis.call('DEL', KEYS[4])
  return {1, slot - now, 0}
end
local reason = 1
if not concOk and slot - now <= maxWait then reason = 2 end
local step = T
if step <= 0 and tau > 0 then step = cost * tau end
if step <= 0 then step = 200 end
local due
if mydue and not eligible then
  due = mydue
elseif mydue then
  -- its turn came but the slot did not: it keeps its place near the front
  due = math.max(slot - maxWait, now) + step
else
  local sum = 0
  for _, u in ipairs(redis.call('ZRANGE', KEYS[3], 0, -1)) do
    local d = tonumber(redis.call('HGET', KEYS[1], 'due:' .. u) or '0')
    if u == tenant or d > now then sum = sum + tonumber(redis.call('HGET', KEYS[1], 'w:' .. u) or '1') end
  end
  due = math.max(calNext + step * sum / weight, slot - maxWait, now)
  redis.call('HSET', KEYS[1], 'due:' .. tenant, tostring(due))
end
-- It waits until its place comes, and counts as waiting until maxWait after that.
redis.call('ZADD', KEYS[5], due + maxWait, waiter)
local keep = math.floor(due - now + maxWait) + 300000
if redis.call('PTTL', KEYS[5]) < keep then redis.call('PEXPIRE', KEYS[5], keep) end
redis.call('SET', KEYS[4], tostring(due), 'PX', math.floor(due - now) + 300000)
return {0, math.floor(due - now), reason}`;

/**
 * KEYS: 1 waiting requests, then each request's calendar place. ARGV: the waiting members
 * (`tenant|request`). Forgets requests that no longer wait.
 */
const FORGET = `
for i = 2, #KEYS do redis.call('DEL', KEYS[i]) end
if #ARGV > 0 then return redis.call('ZREM', KEYS[1], unpack(ARGV)) end
return 0`;

/** KEYS: 1 state hash. ARGV: 1 pause (ms from now). Extends the pause, never shortens it. */
const PAUSE = `
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
local untilMs = now + tonumber(ARGV[1])
local cur = tonumber(redis.call('HGET', KEYS[1], 'pause') or '0')
if untilMs > cur then redis.call('HSET', KEYS[1], 'pause', tostring(untilMs)) end
return untilMs - now`;

/**
 * KEYS: 1 state hash, 2 permits. ARGV: 1 the request's permit ('' when the endpoint declares no
 * maxConcurrent), 2 permit ttl. Asked right before a granted request is sent: {1, ms left} when
 * the endpoint was paused since the grant, {2, 0} when the permit lapsed meanwhile (its holder
 * was held up past the ttl: another worker may have it), else {0, 0} with the permit renewed.
 */
const CONFIRM = `
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
local pause = tonumber(redis.call('HGET', KEYS[1], 'pause') or '0')
if pause > now then return {1, math.ceil(pause - now)} end
if ARGV[1] ~= '' then
  local expiry = tonumber(redis.call('ZSCORE', KEYS[2], ARGV[1]) or '0')
  if expiry <= now then return {2, 0} end
  redis.call('ZADD', KEYS[2], 'XX', now + tonumber(ARGV[2]), ARGV[1])
end
return {0, 0}`;

/** KEYS: 1 state hash. ARGV: 1 ms to add to the token arrival time (negative: tokens given back). */
const CORRECT = `
local cur = redis.call('HGET', KEYS[1], 'toktat')
if not cur then return 0 end
redis.call('HSET', KEYS[1], 'toktat', tostring(tonumber(cur) + tonumber(ARGV[1])))
return 1`;

/** KEYS: 1 permits. ARGV: 1 member, 2 ttl. Renews a permit still held. */
const RENEW = `
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
return redis.call('ZADD', KEYS[1], 'XX', 'CH', now + tonumber(ARGV[2]), ARGV[1])`;

/** KEYS: 1 permits. Counts live permits. */
const IN_USE = `
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
redis.call('ZREMRANGEBYSCORE', KEYS[1], '-inf', now)
return redis.call('ZCARD', KEYS[1])`;

/** KEYS: 1 waiting requests. The members still counting, on the clock of the node holding them. */
const WAITING = `
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
return redis.call('ZRANGEBYSCORE', KEYS[1], '(' .. string.format('%.0f', now), '+inf')`;

type Commands = {
  fleetLimitsAcquire(...args: (string | number)[]): Promise<[number, number, number]>;
  fleetLimitsPause(key: string, ms: number): Promise<number>;
  fleetLimitsConfirm(key: string, permits: string, permit: string, ttl: number): Promise<[number, number]>;
  fleetLimitsCorrect(key: string, ms: number): Promise<number>;
  fleetLimitsRenew(key: string, member: string, ttl: number): Promise<number>;
  fleetLimitsInUse(key: string): Promise<number>;
  fleetLimitsWaiting(key: string): Promise<string[]>;
  fleetLimitsForget(numKeys: number, ...args: string[]): Promise<number>;
};

const defined = new WeakSet<Redis>();

function commands(redis: Redis): Redis & Commands {
  if (!defined.has(redis)) {
    redis.defineCommand("fleetLimitsAcquire", { numberOfKeys: 5, lua: ACQUIRE });
    redis.defineCommand("fleetLimitsForget", { lua: FORGET });
    redis.defineCommand("fleetLimitsPause", { numberOfKeys: 1, lua: PAUSE });
    redis.defineCommand("fleetLimitsConfirm", { numberOfKeys: 2, lua: CONFIRM });
    redis.defineCommand("fleetLimitsCorrect", { numberOfKeys: 1, lua: CORRECT });
    redis.defineCommand("fleetLimitsRenew", { numberOfKeys: 1, lua: RENEW });
    redis.defineCommand("fleetLimitsInUse", { numberOfKeys: 1, lua: IN_USE });
    redis.defineCommand("fleetLimitsWaiting", { numberOfKeys: 1, lua: WAITING });
    defined.add(redis);
  }
  return redis as Redis & Commands;
}

export type Acquired =
  /** `waitMs`: sleep this long, then send. `permit`: release it when the response ends. */
  | { granted: true; waitMs: number; permit: string }
  /** `retryInMs`: when to ask again; `reason`: what is short. */
  | { granted: false; retryInMs: number; reason: "rate" | "concurrency" };

/**
 * A granted request checked again right before it is sent (`ProviderLimits.confirm`): it may
 * go, or the endpoint was paused since its grant (`pausedMs` left), or its concurrency permit
 * lapsed while it was held up.
 */
export type Confirmed =
  | { ok: true }
  | { ok: false; reason: "paused"; pausedMs: number }
  | { ok: false; reason: "permit_lost" };

/**
 * Forgets runs' requests waiting for capacity on every endpoint with limits (they will not
 * ask again: their runs were cancelled or deleted).
 */
export function waitsForgetter(
  limits: Pick<ProviderLimits, "forget">,
  endpoints: readonly { name: string; limits?: EndpointLimits }[],
): (tenant: string, runIds: string[]) => Promise<void> {
  return async (tenant, runIds) => {
    for (const endpoint of endpoints)
      if (hasLimits(endpoint.limits)) await limits.forget(endpoint.name, tenant, runIds);
  };
}

/** The fleet-wide limits of the endpoints of one fleet (FLEET_PREFIX). */
export class ProviderLimits {
  private readonly redis: Redis & Commands;
  readonly tuning: GateTuning;

  constructor(
    redis: Redis,
    private readonly prefix: string,
    tuning: Partial<GateTuning> = {},
  ) {
    this.redis = commands(redis);
    this.tuning = { ...DEFAULT_GATE_TUNING, ...tuning };
  }

  private key(endpoint: string, part = ""): string {
    return `${this.prefix}:endpoint-limits:{${endpoint}}${part}`;
  }

  /**
   * Asks for a slot for one request of `tenant` to `endpoint`. `request` names the waiting
   * request (a run's id) so that it keeps its calendar place across hand-backs.
   */
  async acquire(input: {
    endpoint: string;
    limits: EndpointLimits;
    tenant: string;
    weight: number;
    request: string;
    estimatedTokens: number;
  }): Promise<Acquired> {
    const { endpoint, limits } = input;
    // The tenant leads the permit's name: ACQUIRE counts the permits each tenant holds.
    const permit = `${input.tenant}|${input.request}:${randomUUID()}`;
    const [granted, ms, reason] = await this.redis.fleetLimitsAcquire(
      this.key(endpoint),
      this.key(endpoint, ":permits"),
      this.key(endpoint, ":tenants"),
      this.key(endpoint, `:due:${input.request}`),
      this.key(endpoint, ":waiting"),
      permit,
      input.tenant,
      input.weight,
      this.tuning.maxWaitMs,
      limits.requestsPerMinute ? 60_000 / limits.requestsPerMinute : 0,
      limits.tokensPerMinute ? 60_000 / limits.tokensPerMinute : 0,
      Math.max(1, Math.round(input.estimatedTokens)),
      limits.maxConcurrent ?? 0,
      this.tuning.permitTtlMs,
      input.request,
    );
    if (granted === 1) return { granted: true, waitMs: Math.max(0, Number(ms)), permit };
    return {
      granted: false,
      retryInMs: Math.max(0, Number(ms)),
      reason: Number(reason) === 2 ? "concurrency" : "rate",
    };
  }

  /** Pauses the endpoint for every worker; returns the pause applied (ms). */
  async pause(endpoint: string, retryAfterMs: number | undefined): Promise<number> {
    const ms = Math.min(this.tuning.maxPauseMs, Math.max(0, retryAfterMs ?? this.tuning.defaultPauseMs));
    return Number(await this.redis.fleetLimitsPause(this.key(endpoint), ms));
  }

  /**
   * Whether a granted request may be sent now (asked right before it is): a grant is an answer
   * from the past, and a 429 another worker got since then, recorded by `pause`, means no new
   * request to the endpoint. `permit`: the grant's, when the endpoint declares maxConcurrent
   * (renewed here when still held).
   */
  async confirm(endpoint: string, permit: string | undefined): Promise<Confirmed> {
    const [code, ms] = await this.redis.fleetLimitsConfirm(
      this.key(endpoint),
      this.key(endpoint, ":permits"),
      permit ?? "",
      this.tuning.permitTtlMs,
    );
    if (Number(code) === 1) return { ok: false, reason: "paused", pausedMs: Math.max(1, Number(ms)) };
    if (Number(code) === 2) return { ok: false, reason: "permit_lost" };
    return { ok: true };
  }

  /** Corrects the token estimate of a sent request by what the provider reported. */
  async correctTokens(endpoint: string, limits: EndpointLimits, deltaTokens: number): Promise<void> {
    if (!limits.tokensPerMinute || deltaTokens === 0) return;
    await this.redis.fleetLimitsCorrect(this.key(endpoint), (deltaTokens * 60_000) / limits.tokensPerMinute);
  }

  async renew(endpoint: string, permit: string): Promise<void> {
    await this.redis.fleetLimitsRenew(this.key(endpoint, ":permits"), permit, this.tuning.permitTtlMs);
  }

  async release(endpoint: string, permit: string): Promise<void> {
    await this.redis.zrem(this.key(endpoint, ":permits"), permit);
  }

  /** Concurrency permits held now (expired ones dropped). */
  async inUse(endpoint: string): Promise<number> {
    return Number(await this.redis.fleetLimitsInUse(this.key(endpoint, ":permits")));
  }

  /**
   * Forgets waiting requests of `tenant`: their calendar places, and their tenant's count of
   * waiting requests (they were cancelled, or aborted, while they waited).
   */
  async forget(endpoint: string, tenant: string, requests: readonly string[]): Promise<void> {
    for (let i = 0; i < requests.length; i += 500) {
      const part = requests.slice(i, i + 500);
      await this.redis.fleetLimitsForget(
        part.length + 1,
        this.key(endpoint, ":waiting"),
        ...part.map((request) => this.key(endpoint, `:due:${request}`)),
        ...part.map((request) => `${tenant}|${request}`),
      );
    }
  }

  /** The tenants with a request waiting now, each with how many (for tests and operators). */
  async waiting(endpoint: string): Promise<Map<string, number>> {
    // Redis's clock where the set is, as the scripts that score it: on a cluster a TIME of
    // its own would go to any node, whose clock may be another.
    const members = await this.redis.fleetLimitsWaiting(this.key(endpoint, ":waiting"));
    const counts = new Map<string, number>();
    for (const member of members) {
      const tenant = member.slice(0, member.indexOf("|"));
      counts.set(tenant, (counts.get(tenant) ?? 0) + 1);
    }
    return counts;
  }
}

/**
 * Tuning from the environment (optional, for operators and tests): FLEET_ENDPOINT_MAX_WAIT_MS
 * (the longest in-worker wait before a hand-back), FLEET_ENDPOINT_PERMIT_TTL_MS (a dead
 * worker's concurrency permits free after it), FLEET_ENDPOINT_DEFAULT_PAUSE_MS (a 429 without
 * retry-after). Values that are not positive integers are ignored.
 */
export function gateTuningFromEnv(env: Record<string, string | undefined>): Partial<GateTuning> {
  const read = (name: string) => {
    const n = Number(env[name]);
    return Number.isInteger(n) && n > 0 ? n : undefined;
  };
  const tuning: Partial<GateTuning> = {};
  const maxWaitMs = read("FLEET_ENDPOINT_MAX_WAIT_MS");
  const permitTtlMs = read("FLEET_ENDPOINT_PERMIT_TTL_MS");
  const defaultPauseMs = read("FLEET_ENDPOINT_DEFAULT_PAUSE_MS");
  if (maxWaitMs) tuning.maxWaitMs = maxWaitMs;
  if (permitTtlMs) tuning.permitTtlMs = permitTtlMs;
  if (defaultPauseMs) tuning.defaultPauseMs = defaultPauseMs;
  return tuning;
}
