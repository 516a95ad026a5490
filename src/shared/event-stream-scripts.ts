/**
 * The Lua scripts that start a session's event stream past its history, drop it, and turn it
 * off and on again (events.ts says how the streams stay tied to the stored messages; the
 * appends are event-scripts.ts's). EventWriter registers them on its connection.
 */

/**
 * Drops a session's stream and its seq key when the seq key still says `ARGV[1]` and, when
 * `ARGV[3]` is not empty, its last message's fingerprint is still that (what the caller read
 * before it asked Postgres), and wakes its readers. KEYS: stream, seq key. ARGV: seq, channel,
 * fingerprint.
 */
export const DROP_SCRIPT = `
if redis.call('HEXISTS', KEYS[2], 'deleted') == 1 then return 0 end
if tonumber(redis.call('HGET', KEYS[2], 'seq') or '0') ~= tonumber(ARGV[1]) then return 0 end
if ARGV[3] ~= '' and redis.call('HGET', KEYS[2], 'fp') ~= ARGV[3] then return 0 end
redis.call('DEL', KEYS[1], KEYS[2])
redis.call('PUBLISH', ARGV[2], KEYS[1])
return 1
`;

/**
 * Drops a stream whose session no longer has one (`sessionEvents` turned off) and leaves its
 * seq key as a marker (`off`, expiring after ARGV[2] ms): a worker job that has not yet seen
 * the change writes nothing (APPEND_SCRIPT), and turning it on again (ON_SCRIPT) starts the
 * stream from the first message. A deleted session's tombstone stays (deletion-cleanup.ts).
 * Readers are woken, and end when they next ask (event-stream.ts).
 */
export const DROP_OFF_SCRIPT = `
if redis.call('HEXISTS', KEYS[2], 'deleted') == 1 then return 0 end
redis.call('DEL', KEYS[1], KEYS[2])
redis.call('HSET', KEYS[2], 'off', '1')
redis.call('PEXPIRE', KEYS[2], ARGV[2])
redis.call('PUBLISH', ARGV[1], KEYS[1])
return 1
`;

/** The `off` marker of DROP_OFF_SCRIPT removed (its stream turned on again); a tombstone stays. */
export const ON_SCRIPT = `
if redis.call('HEXISTS', KEYS[1], 'deleted') == 1 then return 0 end
if redis.call('HEXISTS', KEYS[1], 'off') == 0 then return 0 end
return redis.call('DEL', KEYS[1])
`;

/**
 * Starts a session's stream past the start of its history (EventWriter.writeAfterSync: a stream
 * written again from Postgres holds only the stored messages retention would keep), when
 * neither the stream nor its seq key exists: an empty stream marked as trimmed (one entry
 * added more than it holds, the last deleted id now), so that a reader from its start
 * (`0-0`) or from a place of the stream that was lost is told it expired, as for a stream
 * trimmed; and a seq key that says it holds message `ARGV[1]` (fingerprint `ARGV[2]`), so the
 * write that follows goes on from there. Returns 0 when either key exists (someone wrote
 * meanwhile). On a Redis before 7 (no XSETID options) the stream is not marked: there no
 * stream tells that it was trimmed anyway. KEYS: stream, seq key. ARGV: seq, fingerprint, ttl ms.
 */
export const FLOOR_SCRIPT = `
if redis.call('EXISTS', KEYS[1]) == 1 or redis.call('EXISTS', KEYS[2]) == 1 then return 0 end
local t = redis.call('TIME')
local now = string.format('%d-0', tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000))
redis.call('XGROUP', 'CREATE', KEYS[1], 'floor', '$', 'MKSTREAM')
redis.call('XGROUP', 'DESTROY', KEYS[1], 'floor')
redis.pcall('XSETID', KEYS[1], now, 'ENTRIESADDED', 1, 'MAXDELETEDID', now)
redis.call('HSET', KEYS[2], 'seq', ARGV[1], 'fp', ARGV[2])
redis.call('PEXPIRE', KEYS[1], ARGV[3])
redis.call('PEXPIRE', KEYS[2], ARGV[3])
return 1
`;
