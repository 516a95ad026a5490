/**
 * Finds a run's RUN_STARTED in a session's stream over run starts only (EventReader.runStartedId):
 * from the latest one, which the seq key notes (`started`: `RUN_ID ENTRY_ID`), back along each
 * entry's link to the one written before it (field `p`, APPEND_SCRIPT; `0`: none). An earlier
 * run's start costs one entry per run started after it, not every event written since; one
 * trimmed away is known gone at the first link whose entry is gone (trimming removes the
 * oldest first, so every start before it went too). KEYS: stream, seq key. ARGV: run id, most
 * links followed. Returns {'found', id}; {'gone'}; {'scan', end}: read the stream back from
 * `end` (an XREVRANGE end) — a stream with no note (written by an earlier release), an entry
 * with no link (an earlier release's worker wrote it), or the most links followed.
 */
export const RUN_STARTED_SCRIPT = `
local noted = redis.call('HGET', KEYS[2], 'started')
local id = noted and string.match(noted, ' (%S+)$')
if not id then return {'scan', '+'} end
for _ = 1, tonumber(ARGV[2]) do
  local rows = redis.call('XRANGE', KEYS[1], id, id, 'COUNT', 1)
  if #rows == 0 then return {'gone'} end
  local fields, link, data = rows[1][2], nil, nil
  for k = 1, #fields, 2 do
    if fields[k] == 'p' then link = fields[k + 1] elseif fields[k] == 'data' then data = fields[k + 1] end
  end
  local ok, event = pcall(cjson.decode, data or '')
  if ok and type(event) == 'table' and event.runId == ARGV[1] then return {'found', id} end
  if link == nil then return {'scan', '(' .. id} end
  if link == '0' then return {'gone'} end
  id = link
end
return {'scan', id}
`;

/** Run starts one lookup follows at most before it reads the stream back from there. */
export const MOST_LINKS = 2_000;

export type RunStartedAnswer = ["found", string] | ["gone"] | ["scan", string];

export type RedisWithRunStarted = {
  fleetRunStarted(
    stream: string,
    seqKey: string,
    runId: string,
    mostLinks: number,
  ): Promise<RunStartedAnswer>;
};
