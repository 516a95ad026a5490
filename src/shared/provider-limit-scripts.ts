/**
 * The Lua scripts that change an endpoint's limit state (provider-limits.ts says how the
 * limits work), each run atomically on Redis's clock, and their definition on a connection.
 */
import type { Redis } from "ioredis";

/**
 * KEYS: 1 state hash, 2 permits (zset: member → expiry), 3 tenants (zset: tenant → last seen),
 * 4 the request's calendar place (string: due time), 5 waiting requests (zset: `tenant|request`
 * → until when it counts).
 * ARGV: 1 member (the permit), 2 tenant, 3 weight, 4 maxWaitMs, 5 ms per request (0: no
 * limit), 6 ms per token (0: no limit), 7 estimated tokens, 8 max concurrent (0: no limit),
 * 9 permit ttl, 10 the request, 11 '1' when this worker has used the endpoint's state before.
 * The state's `epoch` field marks it as kept since: missing while the worker saw it, Redis lost
 * its data (FLUSHALL, an empty replica), and with it the permits of requests still streaming,
 * so no permit is granted for one permit ttl (`rebuild`): by then every live holder has put its
 * permit back (RENEW), and one not renewed for that long does not count anyway.
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
if redis.call('HSETNX', KEYS[1], 'epoch', tostring(now)) == 1 and ARGV[11] == '1' then
  redis.call('HSET', KEYS[1], 'rebuild', tostring(now + ttl))
end
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
  concOk = free > 0 and tonumber(redis.call('HGET', KEYS[1], 'rebuild') or '0') <= now
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

/**
 * KEYS: 1 permits, 2 state hash. ARGV: 1 member, 2 ttl. Renews a permit still held, putting it
 * back when Redis no longer has it (its data was lost, or the permit lapsed while Redis could
 * not be reached): the request it stands for is still streaming. Such a loss holds back new
 * permits for one ttl, as in ACQUIRE, so that the other holders put theirs back first.
 */
const RENEW = `
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
local ttl = tonumber(ARGV[2])
local added = redis.call('ZADD', KEYS[1], now + ttl, ARGV[1])
if added == 1 then
  redis.call('HSETNX', KEYS[2], 'epoch', tostring(now))
  local rebuild = tonumber(redis.call('HGET', KEYS[2], 'rebuild') or '0')
  if now + ttl > rebuild then redis.call('HSET', KEYS[2], 'rebuild', tostring(now + ttl)) end
end
return added`;

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

export type Commands = {
  fleetLimitsAcquire(...args: (string | number)[]): Promise<[number, number, number]>;
  fleetLimitsPause(key: string, ms: number): Promise<number>;
  fleetLimitsConfirm(key: string, permits: string, permit: string, ttl: number): Promise<[number, number]>;
  fleetLimitsCorrect(key: string, ms: number): Promise<number>;
  fleetLimitsRenew(permits: string, state: string, member: string, ttl: number): Promise<number>;
  fleetLimitsInUse(key: string): Promise<number>;
  fleetLimitsWaiting(key: string): Promise<string[]>;
  fleetLimitsForget(numKeys: number, ...args: string[]): Promise<number>;
};

const defined = new WeakSet<Redis>();

export function commands(redis: Redis): Redis & Commands {
  if (!defined.has(redis)) {
    redis.defineCommand("fleetLimitsAcquire", { numberOfKeys: 5, lua: ACQUIRE });
    redis.defineCommand("fleetLimitsForget", { lua: FORGET });
    redis.defineCommand("fleetLimitsPause", { numberOfKeys: 1, lua: PAUSE });
    redis.defineCommand("fleetLimitsConfirm", { numberOfKeys: 2, lua: CONFIRM });
    redis.defineCommand("fleetLimitsCorrect", { numberOfKeys: 1, lua: CORRECT });
    redis.defineCommand("fleetLimitsRenew", { numberOfKeys: 2, lua: RENEW });
    redis.defineCommand("fleetLimitsInUse", { numberOfKeys: 1, lua: IN_USE });
    redis.defineCommand("fleetLimitsWaiting", { numberOfKeys: 1, lua: WAITING });
    defined.add(redis);
  }
  return redis as Redis & Commands;
}
