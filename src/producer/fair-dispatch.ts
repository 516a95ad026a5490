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
 * Priorities stop at BullMQ's limit (2,097,151): a backlog deeper than that from one tenant
 * is served in order, and fairness returns once it drains below. Jobs queued without a
 * priority (the sweeper's re-queued runs, automatic resumes) go before all prioritized ones.
 */
import { PRIORITY_LIMIT, type Queue } from "bullmq";
import type { Redis } from "ioredis";

/** The priorities of `count` jobs queued after `base`: base+1, base+2, … capped at BullMQ's limit. */
export function prioritiesAfter(base: number, count: number): number[] {
  return Array.from({ length: count }, (_, i) => Math.min(PRIORITY_LIMIT, base + i + 1));
}

// KEYS[1]: the hash. ARGV: tenant, head priority of the queue (0: nothing waits), count, limit.
const TAKE = `
local head = tonumber(ARGV[2])
local clock = head - 1
if head == 0 then
  redis.call('DEL', KEYS[1])
  clock = 0
end
local last = tonumber(redis.call('HGET', KEYS[1], ARGV[1]) or '0')
local base = math.max(last, clock)
local top = math.min(base + tonumber(ARGV[3]), tonumber(ARGV[4]))
redis.call('HSET', KEYS[1], ARGV[1], top)
return base`;

export type Priorities = {
  assign(tenant: string, count: number): Promise<number[] | undefined>;
  /** Starts the tenant over (it has nothing waiting any more: a cancel dropped its runs). */
  forget?(tenant: string): Promise<void>;
};

/** Hands out fair priorities for a tenant's new runs; `undefined` when fair dispatch is off. */
export class FairDispatch implements Priorities {
  private readonly key: string;

  constructor(
    private readonly deps: {
      redis: Pick<Redis, "eval" | "hdel">;
      /** The queue (`runs` or `resumes`): its head is the virtual clock. */
      queue: Pick<Queue, "getJobs" | "name">;
      prefix: string;
      enabled: boolean;
    },
  ) {
    this.key = `${deps.prefix}:fair:${deps.queue.name}`;
  }

  async assign(tenant: string, count: number): Promise<number[] | undefined> {
    if (!this.deps.enabled || count === 0) return undefined;
    const [head] = await this.deps.queue.getJobs(["prioritized"], 0, 0, true);
    const clock = head?.opts.priority ?? 0;
    const base = Number(await this.deps.redis.eval(TAKE, 1, this.key, tenant, clock, count, PRIORITY_LIMIT));
    return prioritiesAfter(base, count);
  }

  /**
   * A cancel dropped the tenant's waiting runs: its last priority would otherwise put its
   * next runs behind every other tenant's backlog up to that point, for runs it no longer has.
   */
  async forget(tenant: string): Promise<void> {
    if (this.deps.enabled) await this.deps.redis.hdel(this.key, tenant);
  }
}
