/**
 * Fair dispatch between tenants (contracts §10) on the `runs` queue and for the resumes
 * people ask for on the `resumes` queue (one instance per queue), with BullMQ priorities
 * (lower runs first) as start-time fair queueing: the k-th waiting job of every tenant gets
 * about the same priority, so workers take tenants in turn. A tenant that queues 100,000
 * runs gets priorities 1…100,000; another tenant that queues one run while 40,000 of those
 * remain gets the priority at the head of the queue, and waits for one job instead of 40,000. Within a tenant, runs keep their order.
 *
 * State: one Redis hash per fleet and queue, `tenant → last priority given`. The queue's head (the
 * lowest priority waiting) is the virtual clock; when nothing waits, the hash starts over.
 *
 * Renumbering: under a backlog that never drains the head climbs with every run taken, and
 * BullMQ's priorities stop at 2,097,151; from there every new run would get the same
 * priority and wait behind the whole backlog. So once the head reaches `renumberAt`
 * (1,048,576 by default), the next assignment renumbers the queue: every waiting prioritized
 * job and every tenant's entry moves down by `head - 1` (the head becomes 1), which keeps
 * every relative order. The renumbering is a state in Redis (`<prefix>:fair:<queue>:renumber`,
 * offset and cursor) advanced by atomic scripts of `chunk` jobs each (1,000 by default),
 * lowest score first: jobs already moved are below every job not yet moved, so workers keep
 * taking jobs in order meanwhile, and a cancel, a job taken or a job added behind the cursor
 * changes nothing. While it runs no priority is handed out (a new one would overtake its
 * tenant's jobs not yet moved): every assignment, in every API process, moves a chunk and
 * asks again, so it finishes in N / chunk calls (measured: 99,000 waiting jobs, 100 steps of
 * ~10 ms). A renumbering left half-done (its process died) is finished by the next assignment.
 * A job added from priorities handed out before a renumbering, once the renumbering passed
 * its place, would keep the old numbering: `added` (called once the jobs are added) moves
 * such jobs by what renumberings moved since (`<prefix>:fair:<queue>:moved`), and leaves
 * alone jobs already moved or still ahead of the cursor. All keys share the queue's hash
 * tag, so it works on a Redis Cluster. A run its worker puts back (busy, handed back) comes
 * back no later than the head (worker/put-back.ts). Not covered: a job BullMQ puts back
 * itself (a retry after an infrastructure error, a stalled job), or one in the delayed set
 * during a renumbering, keeps its old priority and goes behind the waiting runs (it has
 * started once already).
 *
 * Priorities stop at BullMQ's limit (2,097,151): a backlog from one tenant deeper than the
 * distance from the head to the limit is served in order until it drains below. Jobs queued
 * without a priority (the sweeper's re-queued runs, automatic resumes) go before all
 * prioritized ones.
 */
import type { Queue } from "bullmq";
import type { Redis } from "ioredis";
import { bullmq } from "../shared/cjs-packages.js";

/** Where the head's priority starts a renumbering, by default (half of BullMQ's limit). */
export const RENUMBER_AT = 2 ** 20;
/** Jobs one renumbering step moves (one atomic script), by default. */
export const RENUMBER_CHUNK = 1_000;

/** The priorities of `count` jobs queued after `base`: base+1, base+2, … capped at BullMQ's limit. */
export function prioritiesAfter(base: number, count: number): number[] {
  return Array.from({ length: count }, (_, i) => Math.min(bullmq.PRIORITY_LIMIT, base + i + 1));
}

// KEYS: [1] the tenant hash, [2] the renumbering state, [3] the queue's prioritized sorted set,
// [4] the total renumberings moved priorities by (the numbering a priority belongs to).
// ARGV: [1] tenant, [2] count, [3] limit, [4] renumberAt, [5] chunk, [6] job key prefix.
// A prioritized job's score is priority × 2^32 + a counter (BullMQ's getPriorityScore).
// Returns the base of the priorities handed out and the numbering, or -1: a renumbering step ran, ask again.
const TAKE = `
local STEP = 4294967296
local function fmt(n) return string.format('%.0f', n) end
local offset = tonumber(redis.call('HGET', KEYS[2], 'offset') or '0')
if offset == 0 then
  local head = redis.call('ZRANGE', KEYS[3], 0, 0, 'WITHSCORES')[2]
  if head ~= nil then
    local priority = math.floor(tonumber(head) / STEP)
    if priority >= tonumber(ARGV[4]) then
      offset = priority - 1
      local entries = redis.call('HGETALL', KEYS[1])
      for i = 1, #entries, 2 do
        local moved = tonumber(entries[i + 1]) - offset
        if moved > 0 then redis.call('HSET', KEYS[1], entries[i], moved)
        else redis.call('HDEL', KEYS[1], entries[i]) end
      end
      redis.call('HSET', KEYS[2], 'offset', offset, 'cursor', head)
      redis.call('HINCRBY', KEYS[4], 'total', offset)
    end
  end
end
if offset > 0 then
  local shift = offset * STEP
  local chunk = tonumber(ARGV[5])
  local jobs = redis.call('ZRANGEBYSCORE', KEYS[3], redis.call('HGET', KEYS[2], 'cursor'), '+inf',
    'WITHSCORES', 'LIMIT', 0, chunk)
  for i = 1, #jobs, 2 do
    local score = tonumber(jobs[i + 1]) - shift
    redis.call('ZADD', KEYS[3], fmt(score), jobs[i])
    local job = ARGV[6] .. jobs[i]
    if redis.call('EXISTS', job) == 1 then redis.call('HSET', job, 'priority', math.floor(score / STEP)) end
  end
  if #jobs < 2 * chunk then
    redis.call('DEL', KEYS[2])
  else
    redis.call('HSET', KEYS[2], 'cursor', fmt(tonumber(jobs[#jobs]) + 1))
  end
  return -1
end
local head = redis.call('ZRANGE', KEYS[3], 0, 0, 'WITHSCORES')[2]
local clock = 0
if head == nil then
  redis.call('DEL', KEYS[1])
else
  clock = math.floor(tonumber(head) / STEP) - 1
end
local last = tonumber(redis.call('HGET', KEYS[1], ARGV[1]) or '0')
local base = math.max(last, clock)
local top = math.min(base + tonumber(ARGV[2]), tonumber(ARGV[3]))
redis.call('HSET', KEYS[1], ARGV[1], top)
return {base, tonumber(redis.call('HGET', KEYS[4], 'total') or '0')}`;

// A job added from priorities handed out before a renumbering started, after the renumbering
// passed its place (or ended): it still has its old priority, behind the new numbering.
// KEYS: [1] the renumbering state, [2] the prioritized sorted set, [3] the moved total.
// ARGV: [1] the total when the priorities were handed out, [2] job key prefix, then pairs of
// job id and the priority it was given. Returns how many jobs it moved.
const SETTLE = `
local STEP = 4294967296
local moved = tonumber(redis.call('HGET', KEYS[3], 'total') or '0') - tonumber(ARGV[1])
if moved <= 0 then return 0 end
local cursor = tonumber(redis.call('HGET', KEYS[1], 'cursor') or '0')
if cursor == 0 then cursor = math.huge end
local count = 0
for i = 3, #ARGV, 2 do
  local score = tonumber(redis.call('ZSCORE', KEYS[2], ARGV[i]) or '-1')
  -- Not waiting, already moved, or ahead of a renumbering's cursor (which will move it).
  if score >= 0 and math.floor(score / STEP) == tonumber(ARGV[i + 1]) and score < cursor then
    local new = score - moved * STEP
    redis.call('ZADD', KEYS[2], string.format('%.0f', new), ARGV[i])
    redis.call('HSET', ARGV[2] .. ARGV[i], 'priority', math.floor(new / STEP))
    count = count + 1
  end
end
return count`;

export type Priorities = {
  assign(tenant: string, count: number): Promise<number[] | undefined>;
  /** Starts the tenant over (it has nothing waiting any more: a cancel dropped its runs). */
  forget?(tenant: string): Promise<void>;
  /**
   * Told once the jobs of `priorities` (what `assign` returned) are added: a job a
   * renumbering missed meanwhile is moved to the new numbering.
   */
  added?(priorities: readonly number[], jobIds: readonly string[]): Promise<void>;
};

/** Hands out fair priorities for a tenant's new runs; `undefined` when fair dispatch is off. */
export class FairDispatch implements Priorities {
  private readonly key: string;
  /** The renumbering total when each assignment was handed out (its numbering). */
  private readonly tickets = new WeakMap<readonly number[], number>();

  constructor(
    private readonly deps: {
      redis: Pick<Redis, "eval" | "hdel">;
      /** The queue (`runs` or `resumes`): its head is the virtual clock. */
      queue: Pick<Queue, "keys" | "toKey" | "name">;
      prefix: string;
      enabled: boolean;
      /** Head priority that starts a renumbering (RENUMBER_AT); tests pass a few hundred. */
      renumberAt?: number;
      /** Jobs moved per renumbering step (RENUMBER_CHUNK). */
      chunk?: number;
    },
  ) {
    this.key = `${deps.prefix}:fair:${deps.queue.name}`;
  }

  async assign(tenant: string, count: number): Promise<number[] | undefined> {
    if (!this.deps.enabled || count === 0) return undefined;
    const { queue } = this.deps;
    const args = [
      tenant,
      count,
      bullmq.PRIORITY_LIMIT,
      this.deps.renumberAt ?? RENUMBER_AT,
      this.deps.chunk ?? RENUMBER_CHUNK,
      queue.toKey(""),
    ];
    for (;;) {
      const keys = [this.key, `${this.key}:renumber`, queue.keys.prioritized!, `${this.key}:moved`];
      const reply = (await this.deps.redis.eval(TAKE, keys.length, ...keys, ...args)) as number | number[];
      // -1: a renumbering step ran; every call moves one chunk, so this ends.
      if (Array.isArray(reply)) {
        const priorities = prioritiesAfter(Number(reply[0]), count);
        this.tickets.set(priorities, Number(reply[1]));
        return priorities;
      }
    }
  }

  async added(priorities: readonly number[], jobIds: readonly string[]): Promise<void> {
    const ticket = this.tickets.get(priorities);
    if (ticket === undefined) return;
    this.tickets.delete(priorities);
    const { queue } = this.deps;
    const keys = [`${this.key}:renumber`, queue.keys.prioritized!, `${this.key}:moved`];
    const pairs = jobIds.flatMap((id, i) => (priorities[i] ? [id, priorities[i]] : []));
    await this.deps.redis.eval(SETTLE, keys.length, ...keys, ticket, queue.toKey(""), ...pairs);
  }

  /**
   * A cancel dropped the tenant's waiting runs: its last priority would otherwise put its
   * next runs behind every other tenant's backlog up to that point, for runs it no longer has.
   */
  async forget(tenant: string): Promise<void> {
    if (this.deps.enabled) await this.deps.redis.hdel(this.key, tenant);
  }
}
