/**
 * A job the worker puts back itself (its session is busy, or it waits for its endpoint's
 * capacity) goes to BullMQ's delayed set and, when its delay ends, back among the waiting
 * jobs with the priority in its hash. Fair dispatch renumbers the waiting jobs when the
 * queue's head climbs too high (fair-dispatch.ts), but only those waiting: a job that was
 * running meanwhile kept its priority of the old numbering and came back behind the whole
 * renumbered backlog, though it had reached the head once already. So before it goes back
 * its priority is lowered to the queue's head (1 when nothing waits): it comes back where
 * it would have anyway had no renumbering happened (its priority was below the head).
 */
import type { Job } from "bullmq";
import type { Redis } from "ioredis";

// KEYS: [1] the queue's prioritized sorted set, [2] the job's hash.
// A prioritized score is priority × 2^32 + a counter (BullMQ's getPriorityScore).
// Returns the priority the job comes back with (0: none, it goes to the wait list).
const CATCH_UP = `
local priority = tonumber(redis.call('HGET', KEYS[2], 'priority') or '0')
if priority <= 0 then return 0 end
local head = redis.call('ZRANGE', KEYS[1], 0, 0, 'WITHSCORES')[2]
local target = 1
if head ~= nil then target = math.max(1, math.floor(tonumber(head) / 4294967296)) end
if priority > target then
  redis.call('HSET', KEYS[2], 'priority', target)
  return target
end
return priority`;

/**
 * Puts the job back into the delayed set until `until` (epoch ms), its priority no later
 * than the queue's head. The caller then throws BullMQ's DelayedError.
 */
export async function putBack(
  redis: Pick<Redis, "eval">,
  prefix: string,
  job: Job,
  until: number,
  token: string | undefined,
): Promise<void> {
  const key = (type: string) => `${prefix}:${job.queueName}:${type}`;
  await redis.eval(CATCH_UP, 2, key("prioritized"), key(job.id!));
  await job.moveToDelayed(until, token);
}
