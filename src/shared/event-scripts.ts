/**
 * The Lua scripts that write and drop session event streams (events.ts says how the streams
 * stay tied to the stored messages). EventWriter registers them on its connection.
 */
import type { Redis } from "ioredis";

/**
 * Appends to the streams of one or more sessions in one call. KEYS: per write, its stream and
 * its seq key. ARGV: maxEvents, maxAgeMs, channel, then per write: its stream key (published),
 * its entry count n, then n × (seq, type, data). `seq` is a message's fingerprint,
 * `SEQ|createdAt` (`fingerprint`), `0` for other events, `r:RUN_ID` for a RUN_COMPLETED, and
 * `c:FINGERPRINT` for a check (type CHECK, never written): the writer's stored message at the
 * seq it believes the stream has last. The writes are applied in order, each against its
 * session's seq as the writes before it left it. A run's RUN_COMPLETED is written once: the seq
 * key keeps the run last written one (`done`), and a second one for that run is skipped (a late
 * writer after a repair, see `missingRunEnd`). The seq key also keeps the fingerprint of its
 * last message (`fp`): a check at that seq with another fingerprint means the stream's messages
 * are not the stored ones (Postgres restored to an earlier point, `dropIfDiverged`). Returns,
 * per write, {"ok", seq before it, its fingerprint ('' if not kept), ids...}, {"gap", last},
 * {"diverged", last, fp} or {"deleted"}: the seq key is a deleted session's tombstone
 * (`deleted` set by deletion-cleanup.ts), and nothing is written, so a late writer (a worker
 * frozen across the delete) does not recreate the stream; the same for a stream turned off
 * (`off`, DROP_OFF_SCRIPT) until it is turned on. Read with the seq, in one HMGET.
 *
 * `s:FINGERPRINT` (type START, never written) starts a stream that has none yet (no seq kept:
 * a new session's, or one that expired whole) after that stored message: the messages up to it
 * are taken as there, not written (a long session's next run after an expiry writes from its
 * own start, not every stored message), and the seq key keeps it as `start`, so that a reader
 * from `0-0` is told the stream does not begin at the first message (event-stream.ts). On a
 * stream that has a seq already it is ignored, and messages must follow that seq as always;
 * a seq below the start's is a gap (as a CHECK past it): the writer believed the messages up
 * to the start were there, and its RUN_STARTED must not come before them. A seq key marked
 * `whole` (ON_SCRIPT: a stream turned on, whose history the API is writing; DROP_SCRIPT: a
 * stale stream dropped, written again from the first message) refuses a start
 * as well, so that the stream holds every stored message once the API answers; the first
 * write that adds entries removes the mark.
 */
export const APPEND_SCRIPT = `
local t = redis.call('TIME')
local minId = tostring(tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000) - tonumber(ARGV[2]))
-- seq, fingerprint, ended run, check
local function parse(arg)
  local head = string.sub(arg, 1, 2)
  if head == 'r:' then return 0, nil, string.sub(arg, 3), nil end
  if head == 'c:' then return 0, nil, nil, string.sub(arg, 3) end
  if head == 's:' then return 0, nil, nil, nil, string.sub(arg, 3) end
  local bar = string.find(arg, '|', 1, true)
  if bar then return tonumber(string.sub(arg, 1, bar - 1)), arg, nil, nil end
  return tonumber(arg) or 0, nil, nil, nil
end
local results = {}
local a = 4
for w = 1, #KEYS / 2 do
  local stream, seqKey = KEYS[2 * w - 1], KEYS[2 * w]
  local name, first = ARGV[a], a + 2
  local stop = first + 3 * tonumber(ARGV[a + 1]) - 1
  a = stop + 1
  -- A deleted session's seq key is a tombstone (deletion-cleanup.ts): nothing is written.
  local head = redis.call('HMGET', seqKey, 'seq', 'deleted', 'off', 'whole')
  local gone = head[2] or head[3]
  local last = tonumber(head[1] or '0')
  local prior = last
  local expect = last
  local gap = false
  local diverged = nil
  local startFp, startSeq = nil, 0
  local mark = tostring(last) .. '|'
  for i = first, stop, 3 do
    local seq, _, _, check, start = parse(ARGV[i])
    if start ~= nil then
      local at = tonumber(string.match(start, '^(%d+)|'))
      if head[1] == false and head[4] == false and expect == 0 and startFp == nil then
        startFp, startSeq = start, at
        expect = at
      elseif at > last then
        -- Not started here (a stream begun meanwhile, or one whose history is being written):
        -- the messages up to the start go first, as for a CHECK past the stream's seq.
        gap = true
        break
      end
    end
    if check ~= nil then
      if string.sub(check, 1, #mark) == mark then
        local have = redis.call('HGET', seqKey, 'fp')
        if have and have ~= check and string.sub(have, 1, #mark) == mark then diverged = have end
      elseif tonumber(string.match(check, '^(%d+)|') or '0') > last then
        -- The writer believes the stream has a message it lacks (lost, expired, dropped): a
        -- gap, so that the missing messages go first, even before a write of events alone.
        gap = true
        break
      end
    end
    if seq > expect then
      if seq ~= expect + 1 then gap = true break end
      expect = seq
    end
  end
  if gone then
    results[w] = {'deleted'}
  elseif diverged then
    results[w] = {'diverged', tostring(last), diverged}
  elseif gap then
    results[w] = {'gap', tostring(last)}
  else
    local out = {'ok', tostring(prior), redis.call('HGET', seqKey, 'fp') or ''}
    -- The run whose RUN_COMPLETED the stream has last: read only for a write that ends a run.
    local done, ends, lastFp = nil, nil, nil
    if startFp then last, lastFp = startSeq, startFp end
    for i = first, stop, 3 do
      local seq, fp, ended, check, start = parse(ARGV[i])
      if ended ~= nil and done == nil then done = redis.call('HGET', seqKey, 'done') end
      if check == nil and start == nil and ((seq == 0 and (ended == nil or ended ~= done)) or seq > last) then
        out[#out + 1] = redis.call('XADD', stream, 'MAXLEN', '~', ARGV[1], '*', 'type', ARGV[i + 1], 'data', ARGV[i + 2])
        if seq > 0 then last, lastFp = seq, fp end
        if ended ~= nil then done, ends = ended, ended end
      end
    end
    if #out > 3 then
      redis.call('XTRIM', stream, 'MINID', '~', minId)
      redis.call('HSET', seqKey, 'seq', tostring(last))
      if lastFp then redis.call('HSET', seqKey, 'fp', lastFp) end
      if ends then redis.call('HSET', seqKey, 'done', ends) end
      if startFp then redis.call('HSET', seqKey, 'start', tostring(startSeq)) end
      if head[4] then redis.call('HDEL', seqKey, 'whole') end
      redis.call('PEXPIRE', stream, ARGV[2])
      redis.call('PEXPIRE', seqKey, ARGV[2])
      redis.call('PUBLISH', ARGV[3], name)
    end
    results[w] = out
  end
end
return results
`;

/**
 * Drops a session's stream and its seq key when the seq key still says `ARGV[1]` and, when
 * `ARGV[3]` is not empty, its last message's fingerprint is still that (what the caller read
 * before it asked Postgres), and wakes its readers. KEYS: stream, seq key. ARGV: seq, channel,
 * fingerprint, ttl ms. The seq key is left marked `whole` (as by ON_SCRIPT) for that long: the
 * dropper writes every stored message again, and a run starting meanwhile does not start the
 * stream at its RUN_STARTED.
 */
export const DROP_SCRIPT = `
if redis.call('HEXISTS', KEYS[2], 'deleted') == 1 then return 0 end
if tonumber(redis.call('HGET', KEYS[2], 'seq') or '0') ~= tonumber(ARGV[1]) then return 0 end
if ARGV[3] ~= '' and redis.call('HGET', KEYS[2], 'fp') ~= ARGV[3] then return 0 end
redis.call('DEL', KEYS[1], KEYS[2])
redis.call('HSET', KEYS[2], 'whole', '1')
redis.call('PEXPIRE', KEYS[2], ARGV[4])
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

/**
 * The `off` marker of DROP_OFF_SCRIPT removed (its stream turned on again); a tombstone stays.
 * A seq key without a seq (the stream turned on, or gone) is left marked `whole` for ARGV[1]
 * ms: APPEND_SCRIPT refuses a START until a write adds entries, so a run that starts while
 * the API writes the stored history writes that history first instead of starting the stream
 * at its RUN_STARTED. Returns 1 when the `off` marker went.
 */
export const ON_SCRIPT = `
if redis.call('HEXISTS', KEYS[1], 'deleted') == 1 then return 0 end
local off = redis.call('HEXISTS', KEYS[1], 'off')
if off == 1 then redis.call('DEL', KEYS[1]) end
if redis.call('HEXISTS', KEYS[1], 'seq') == 0 then
  redis.call('HSET', KEYS[1], 'whole', '1')
  redis.call('PEXPIRE', KEYS[1], ARGV[1])
end
return off
`;

export type RedisWithAppend = Redis & {
  fleetEventsAppendMany(numKeys: number, ...args: (string | number)[]): Promise<string[][]>;
  fleetEventsDropOff(stream: string, seqKey: string, channel: string, ttlMs: number): Promise<number>;
  fleetEventsOn(seqKey: string, ttlMs: number): Promise<number>;
  fleetEventsDropStale(
    stream: string,
    seqKey: string,
    seq: number,
    channel: string,
    fp: string,
    ttlMs: number,
  ): Promise<number>;
};
