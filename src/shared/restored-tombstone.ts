/**
 * A deleted session's seq key is a tombstone (deletion-cleanup.ts): the event script writes
 * nothing more for it, for 60 s, or FLEET_EVENTS_MAX_AGE_MS (a day) when a run had not ended.
 * Postgres restored from a backup taken before the delete brings the session back (README,
 * Restoring from backups) while Redis keeps the tombstone and the deleted stream, whose last
 * event is SESSION_DELETED: the session ran and nothing of it reached its stream. A tombstone
 * whose session Postgres has — and not in a batch marked deleted, whose sessions get theirs
 * before their rows go — can only come from the lost timeline: it goes with that stream, and
 * the stream is written again from Postgres as a lost one is (a reader's place in it: 410).
 */
import type { Redis } from "ioredis";
import type { Database } from "./db/client.js";
import { eventStreamKey, eventsNotifyChannel, seqKey } from "./events.js";

/** KEYS: the stream, its seq key; ARGV: the notify channel. Drops both while the tombstone is there. */
const DROP_TOMBSTONE_SCRIPT = `
if redis.call('HEXISTS', KEYS[2], 'deleted') == 0 then return 0 end
redis.call('DEL', KEYS[1], KEYS[2])
redis.call('PUBLISH', ARGV[1], KEYS[1])
return 1
`;

/**
 * Drops the session's tombstone and its deleted stream when Postgres has the session (see
 * above); true when it did. Looks in Postgres only when Redis holds a tombstone.
 */
export async function dropRestoredTombstone(
  redis: Redis,
  prefix: string,
  database: Database,
  sessionId: string,
): Promise<boolean> {
  const key = seqKey(prefix, sessionId);
  if ((await redis.hexists(key, "deleted")) === 0) return false;
  const [there] = await database.sql`
    select 1 from sessions s where s.id = ${sessionId}
       and not exists (select 1 from batches b where b.id = s.batch_id and b.deleted_at is not null)`;
  if (!there) return false;
  const dropped = await redis.eval(
    DROP_TOMBSTONE_SCRIPT,
    2,
    eventStreamKey(prefix, sessionId),
    key,
    eventsNotifyChannel(prefix),
  );
  return dropped === 1;
}
