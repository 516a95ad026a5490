/**
 * How workers signal the sweeper, named in one place because both roles use the names:
 * - each worker names one Redis connection `<prefix>:live:<workerId>`; the kernel closes a
 *   killed process's socket at once, so the name vanishes from CLIENT LIST within
 *   milliseconds of a crash (the sweeper's liveness check reads it; on a cluster, on every
 *   master);
 * - each worker also beats a heartbeat: its id in the sorted set `<prefix>:alive`, scored
 *   with when it lapses (Redis's clock, one lease TTL ahead), renewed every third of the
 *   TTL. The sweeper reads it only where Redis refuses CLIENT LIST (managed services often
 *   do); a killed worker then counts as dead once its heartbeat lapses, within a lease TTL;
 * - workers publish runs that stopped short, and jobs BullMQ failed or found stalled, on
 *   `<prefix>:events`, so the sweeper wakes at once instead of at its next poll.
 */
import type { Redis } from "ioredis";

/** The client name a worker gives its liveness connection. */
export function livenessName(prefix: string, workerId: string): string {
  return `${prefix}:live:${workerId}`;
}

/** The marker before a worker id in a liveness connection's name. */
export function livenessMarker(prefix: string): string {
  return `${prefix}:live:`;
}

/** The Redis channel on which workers report runs that stopped short, and failed or stalled jobs. */
export function eventsChannel(prefix: string): string {
  return `${prefix}:events`;
}

/**
 * The Redis channel on which the API asks workers to abort sessions it cancelled
 * (contracts §9): a message is `{"sessionIds": [...], "runIds": [...]}`, `runIds` the runs
 * the cancel found running. Best effort: Postgres holds the cancel, and a worker checks it
 * before each tool starts.
 */
export function cancelChannel(prefix: string): string {
  return `${prefix}:cancel`;
}

/** Publishes a cancel channel message: abort `runIds` of `sessionIds`. */
export async function publishCancel(
  redis: Pick<Redis, "publish">,
  prefix: string,
  sessionIds: string[],
  runIds: string[],
): Promise<void> {
  await redis.publish(cancelChannel(prefix), JSON.stringify({ sessionIds, runIds }));
}

/**
 * A cancel channel message (pure): `sessionIds` to abort; `runIds` (additive), the only runs
 * of theirs to abort, or null when the message names none (a delete's, an older API's): every
 * run of those sessions; and (additive, from deletes) `deleted`, every session a delete
 * removed, whose data a worker keeps on its disk or in extensions goes too. Anything else is
 * ignored.
 */
export function parseCancelMessage(text: string): {
  sessionIds: string[];
  runIds: string[] | null;
  deleted: string[];
} {
  let body: { sessionIds?: unknown; runIds?: unknown; deleted?: unknown };
  try {
    body = JSON.parse(text) ?? {};
  } catch {
    return { sessionIds: [], runIds: null, deleted: [] };
  }
  const ids = (value: unknown) => (Array.isArray(value) ? value.map(String) : []);
  return {
    sessionIds: ids(body.sessionIds),
    runIds: Array.isArray(body.runIds) ? ids(body.runIds) : null,
    deleted: ids(body.deleted),
  };
}

/** The sorted set of worker heartbeats: member a worker id, score when it lapses (ms). */
export function heartbeatKey(prefix: string): string {
  return `${prefix}:alive`;
}

// Redis's own clock, so machines whose clocks disagree still agree on who lapsed. (Redis
// before 7 needs effects replication for a script that writes after TIME.)
const NOW_MS = `if redis.replicate_commands then redis.replicate_commands() end
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)`;
// A beat also drops lapsed ids, so the set stays small where no sweeper reads it (CLIENT LIST
// works there) though every worker process beats under an id of its own.
const BEAT = `${NOW_MS}
redis.call('ZREMRANGEBYSCORE', KEYS[1], '-inf', now)
redis.call('ZADD', KEYS[1], now + tonumber(ARGV[2]), ARGV[1])
return now`;
const LIVE = `${NOW_MS}
redis.call('ZREMRANGEBYSCORE', KEYS[1], '-inf', now)
return redis.call('ZRANGE', KEYS[1], 0, -1)`;

/** One heartbeat of `workerId`: alive for `ttlMs` more. */
export async function beat(redis: Redis, prefix: string, workerId: string, ttlMs: number): Promise<void> {
  await redis.eval(BEAT, 1, heartbeatKey(prefix), workerId, ttlMs);
}

/** A worker that stops cleanly takes its heartbeat out at once. */
export async function endHeartbeat(redis: Redis, prefix: string, workerId: string): Promise<void> {
  await redis.zrem(heartbeatKey(prefix), workerId);
}

/** The ids whose heartbeat has not lapsed (lapsed ones are removed). */
export async function heartbeats(redis: Redis, prefix: string): Promise<Set<string>> {
  return new Set((await redis.eval(LIVE, 1, heartbeatKey(prefix))) as string[]);
}
