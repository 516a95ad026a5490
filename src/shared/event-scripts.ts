/**
 * The Lua scripts that write and drop session event streams (events.ts says how the streams
 * stay tied to the stored messages). EventWriter registers them on its connection.
 */
import type { Redis } from "ioredis";

/**
 * Trims a stream's oldest entries while what it holds is over `maxBytes` (of type and data,
 * as written): each entry's `c` is the bytes written to the stream through it, and the seq
 * key keeps the total written (`total`) and where the entries kept begin (`floor`, as last
 * known: MAXLEN ~ and MINID ~ remove entries without saying, so it is read again from the
 * first entry whenever it says the stream is over; `floor` is passed in, read with the
 * other fields). The newest entry is always kept, whatever
 * its size. The newest entry removed goes by XDEL, which sets the stream's
 * `max-deleted-entry-id` (trimming does not): a reader whose place is gone can tell whether
 * entries after it went too (EventReader.placeGone). About 512 entries at most are looked at
 * per call; what is left over goes at the next write.
 */
const TRIM_BYTES = `
local function trimBytes(stream, seqKey, total, floor, newest)
  if total - floor <= maxBytes then return end
  local cut, cutFloor, from, stop = nil, nil, '-', false
  -- Pages of 1, 2, 4, … 16 entries: with big entries, one cut reads about three, not a page.
  local n, looked = 1, 0
  while looked < 512 do
    local rows = redis.call('XRANGE', stream, from, '+', 'COUNT', n)
    looked = looked + n
    for j = 1, #rows do
      local id, fields = rows[j][1], rows[j][2]
      local c, size = nil, 0
      for k = 1, #fields, 2 do
        if fields[k] == 'c' then c = tonumber(fields[k + 1])
        elseif fields[k] ~= 'p' then size = size + #fields[k + 1] end
      end
      -- An entry written before entries had c counts for nothing: it goes with the ones after it.
      if id == newest or (c ~= nil and total - (c - size) <= maxBytes) then
        if c ~= nil then floor = c - size end
        stop = true
        break
      end
      cut = id
      if c ~= nil then cutFloor = c end
    end
    if stop or #rows < n then break end
    from = '(' .. rows[#rows][1]
    n = math.min(n * 2, 16)
  end
  if cut ~= nil then
    redis.call('XDEL', stream, cut)
    redis.call('XTRIM', stream, 'MINID', cut)
    if not stop and cutFloor ~= nil then floor = cutFloor end
  end
  redis.call('HSET', seqKey, 'floor', string.format('%d', floor))
end
`;

/**
 * How many runs' ends a stream's seq key remembers (`ended`): a late end of an older run than
 * these (ENDS_KEPT runs ended since, none of them storing a message) would still be written.
 */
const ENDS_KEPT = 8;

/**
 * Appends to the streams of one or more sessions in one call. KEYS: per write, its stream and
 * its seq key. ARGV: maxEvents, maxAgeMs, channel, maxBytes (0: no bound, TRIM_BYTES), then per write: its stream key (published),
 * its entry count n, then n × (seq, type, data). `seq` is a message's fingerprint,
 * `SEQ|createdAt` (`fingerprint`), `0` for other events, `r:RUN_ID` for a RUN_COMPLETED, `s:RUN_ID`
 * for a RUN_STARTED (the seq key keeps the last one written, `started`: `RUN_ID ENTRY_ID`, so
 * that a reader finds where the latest run starts without reading the stream back; and each
 * RUN_STARTED entry's field `p` is the id of the one written before it, `0` for none, so that
 * an earlier run's start is found over run starts only: RUN_STARTED_SCRIPT), and
 * `d:RUN_ID` for a run's other events (event-entry-key.ts; skipped once it ended or another
 * run started: a worker that lost its run writes none late, nor its RUN_STARTED), and
 * `c:FINGERPRINT` for a check (type CHECK, never written): the writer's stored message at the
 * seq it believes the stream has last, and `k:PARK_ID` for the SESSION_PARKED of one parking
 * (park-announcements.ts): written once, like a run's RUN_COMPLETED (the seq key keeps the last
 * one written, `parked`), whoever announces it (its parker, or a sweep that finds it owed). The writes are applied in order, each against its
 * session's seq as the writes before it left it. A run's RUN_COMPLETED is written once: the seq
 * key keeps the run last written one (`done`), and a second one for that run is skipped (a late
 * writer after a repair, see `missingRunEnd`); so is one whose write shows its writer behind
 * the stream (its check and messages stop before the stream's last message: a later run's),
 * which `done`, by then that later run's, no longer catches (a worker frozen after its commit,
 * woken after the resume ended: found by `npm run chaos`); so is one of a run among the last
 * `ENDS_KEPT` whose end the stream has (`ended`, newest first): after a later run that stored
 * no message, the late writer's check is not behind and `done` is that run's (a sweeper frozen
 * before writing an end another sweeper repaired, woken after the resume failed at once). The seq key also keeps the fingerprint of its
 * last message (`fp`): a check at that seq with another fingerprint means the stream's messages
 * are not the stored ones (Postgres restored to an earlier point, `dropIfDiverged`). Returns,
 * per write, {"ok", seq before it, its fingerprint ('' if not kept), entries written (a
 * number: their ids are not sent back, which no caller reads)}, {"gap", last},
 * {"diverged", last, fp} or {"deleted"}: the seq key is a deleted session's tombstone
 * (`deleted` set by deletion-cleanup.ts), and nothing is written, so a late writer (a worker
 * frozen across the delete) does not recreate the stream; the same for a stream turned off
 * (`off`, DROP_OFF_SCRIPT) until it is turned on. Each write reads every field of the seq
 * key it may need (seq, deleted, off, fp, done, total, floor, started, parked, ended) in one HMGET before it writes,
 * and writes the ones it moved in one HSET (and `floor`, when TRIM_BYTES cut, in another):
 * the fields are read once and set once per write, not one command each (their reads and
 * writes were most of the fleet's Redis commands per session: 69 → 39 per bench session,
 * test/events-script-commands.test.ts).
 */
export const APPEND_SCRIPT = `
local t = redis.call('TIME')
local minId = tostring(tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000) - tonumber(ARGV[2]))
local maxBytes = tonumber(ARGV[4])
${TRIM_BYTES}
-- seq, fingerprint, ended run, check, started run, parking, run of a run event
local function parse(arg)
  local head = string.sub(arg, 1, 2)
  if head == 'r:' then return 0, nil, string.sub(arg, 3), nil, nil, nil, nil end
  if head == 'c:' then return 0, nil, nil, string.sub(arg, 3), nil, nil, nil end
  if head == 's:' then return 0, nil, nil, nil, string.sub(arg, 3), nil, nil end
  if head == 'k:' then return 0, nil, nil, nil, nil, string.sub(arg, 3), nil end
  if head == 'd:' then return 0, nil, nil, nil, nil, nil, string.sub(arg, 3) end
  local bar = string.find(arg, '|', 1, true)
  if bar then return tonumber(string.sub(arg, 1, bar - 1)), arg, nil, nil, nil, nil end
  return tonumber(arg) or 0, nil, nil, nil, nil, nil
end
local results = {}
local a = 5
for w = 1, #KEYS / 2 do
  local stream, seqKey = KEYS[2 * w - 1], KEYS[2 * w]
  local name, first = ARGV[a], a + 2
  local stop = first + 3 * tonumber(ARGV[a + 1]) - 1
  a = stop + 1
  -- A deleted session's seq key is a tombstone (deletion-cleanup.ts): nothing is written.
  local head = redis.call('HMGET', seqKey, 'seq', 'deleted', 'off', 'fp', 'done', 'total', 'floor', 'started', 'parked', 'ended')
  local gone = head[2] or head[3]
  local last = tonumber(head[1] or '0')
  local prior = last
  local expect = last
  local gap = false
  local diverged = nil
  -- The last message this writer has stored, as far as this write tells (its check, its
  -- messages); nil when it carries neither.
  local known = nil
  -- The seq as stored (written by tostring below), reused as text: no number formatted again.
  local lastText = head[1] or '0'
  local mark = lastText .. '|'
  for i = first, stop, 3 do
    local seq, _, _, check = parse(ARGV[i])
    if seq > 0 and (known == nil or seq > known) then known = seq end
    if check ~= nil then
      local checked = tonumber(string.match(check, '^(%d+)|') or '0')
      if known == nil or checked > known then known = checked end
      if string.sub(check, 1, #mark) == mark then
        local have = head[4]
        if have and have ~= check and string.sub(have, 1, #mark) == mark then diverged = have end
      elseif checked > last then
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
    local out = {'ok', lastText, head[4] or ''}
    -- The entries written, and the id of the newest (kept by TRIM_BYTES).
    local written, newest = 0, nil
    -- The run whose RUN_COMPLETED the stream has last (false: none).
    local done, ends, lastFp, startedAt = head[5], nil, nil, nil
    -- The runs whose RUN_COMPLETED the stream has, newest first (ENDS_KEPT at most); done
    -- alone, for a stream written before they were kept.
    local endedList = head[10] or ''
    local function hasEnded(run)
      return run == done or string.find(' ' .. endedList .. ' ', ' ' .. run .. ' ', 1, true) ~= nil
    end
    -- The parking whose SESSION_PARKED the stream has last (false: none).
    local parkedDone, parks = head[9], nil
    -- A run's end from a writer behind the stream (the stream holds messages past every one
    -- it has stored: a later run's) is late, e.g. a worker frozen after its commit: the end is
    -- in the stream already (a repair wrote it) or, after a later run's events, not wanted.
    local behind = known ~= nil and last > known
    -- The bytes (type and data) ever written to the stream, through each entry (its field c).
    local total = tonumber(head[6] or '0')
    -- The RUN_STARTED written last ('0': none), which the next one links to (its field p).
    local linked = head[8] and string.match(head[8], ' (%S+)$') or '0'
    -- The run whose RUN_STARTED the stream has last (nil: none: turned on or rebuilt mid-run).
    -- A run's event (d:RUN_ID) after its run ended (done) or another started is a late writer's
    -- (its worker lost the run): skipped. So is a RUN_STARTED of an ended run or from a writer
    -- behind: late, it would make a dead run the one readers start at, and silence the live one.
    local current = head[8] and string.match(head[8], '^(%S+) ') or nil
    for i = first, stop, 3 do
      local seq, fp, ended, check, started, parked, of = parse(ARGV[i])
      if check == nil and ((seq == 0 and (ended == nil or (not hasEnded(ended) and not behind))
          and (parked == nil or (parked ~= parkedDone and not behind))
          and (started == nil or (not hasEnded(started) and not behind))
          and (of == nil or (of ~= done and (current == nil or of == current)))) or seq > last) then
        total = total + #ARGV[i + 1] + #ARGV[i + 2]
        if started ~= nil then
          newest = redis.call('XADD', stream, 'MAXLEN', '~', ARGV[1], '*', 'type', ARGV[i + 1], 'data', ARGV[i + 2], 'c', string.format('%d', total), 'p', linked)
          linked = newest
          startedAt = started .. ' ' .. linked
          current = started
        else
          newest = redis.call('XADD', stream, 'MAXLEN', '~', ARGV[1], '*', 'type', ARGV[i + 1], 'data', ARGV[i + 2], 'c', string.format('%d', total))
        end
        written = written + 1
        if seq > 0 then last, lastFp = seq, fp end
        if ended ~= nil then
          done, ends = ended, ended
          local kept, n = ended, 1
          for id in string.gmatch(endedList, '%S+') do
            if n >= ${ENDS_KEPT} then break end
            kept, n = kept .. ' ' .. id, n + 1
          end
          endedList = kept
        end
        if parked ~= nil then parkedDone, parks = parked, parked end
      end
    end
    out[4] = written
    if written > 0 then
      redis.call('XTRIM', stream, 'MINID', '~', minId)
      -- What the entries moved, in one HSET (before any trim: the seq is kept whatever follows).
      local fields = {'seq', last == prior and lastText or tostring(last), 'total', string.format('%d', total)}
      if lastFp then fields[#fields + 1] = 'fp'; fields[#fields + 1] = lastFp end
      if ends then
        fields[#fields + 1] = 'done'; fields[#fields + 1] = ends
        fields[#fields + 1] = 'ended'; fields[#fields + 1] = endedList
      end
      if startedAt then fields[#fields + 1] = 'started'; fields[#fields + 1] = startedAt end
      if parks then fields[#fields + 1] = 'parked'; fields[#fields + 1] = parks end
      redis.call('HSET', seqKey, unpack(fields))
      if maxBytes > 0 then trimBytes(stream, seqKey, total, tonumber(head[7] or '0'), newest) end
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
 * One write's reply from APPEND_SCRIPT (its Returns): "ok", prior seq, its fingerprint, entries
 * written (a number); or "gap", "diverged", "deleted".
 */
export type AppendReply = readonly (string | number)[];

export type RedisWithAppend = Redis & {
  fleetEventsFloor(stream: string, seqKey: string, seq: number, fp: string, ttlMs: number): Promise<number>;
  fleetEventsDropOff(stream: string, seqKey: string, channel: string, ttlMs: number): Promise<number>;
  fleetEventsOn(seqKey: string): Promise<number>;
  fleetEventsDropStale(
    stream: string,
    seqKey: string,
    seq: number,
    channel: string,
    fp: string,
  ): Promise<number>;
};
