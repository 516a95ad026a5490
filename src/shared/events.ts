/**
 * Session events (contracts §7): one Redis Stream per session, `<prefix>:events:<sessionId>`,
 * written by workers and sweepers, read by the API's SSE route. The stream entry id is the
 * event id (strictly increasing per session, opaque to clients).
 *
 * How `MESSAGE` events stay tied to committed messages. A message is put in the stream only
 * after its commit, so a reader never sees a message that is not stored. To never miss one,
 * the stream itself is made complete by seq: every write goes through one Lua script that
 * keeps the highest message seq already in the stream (`<prefix>:events-seq:<sessionId>`)
 * and appends a `MESSAGE` only for seq = last + 1 (a lower seq is skipped as already there,
 * a higher one is refused as a gap). Every writer sends, with whatever it writes, the stored
 * messages the stream may lack: a worker from its in-memory history (which is the stored
 * one while it holds the lease), the sweeper from Postgres before it writes the
 * `RUN_COMPLETED` of a crashed or stalled run. So a message whose `XADD` was lost (the
 * worker was SIGKILLed right after the commit, or Redis blinked) is in the stream before
 * the next event anyone writes for the session — at the latest before the `RUN_COMPLETED`
 * that ends its run — in seq order, exactly once, even when a frozen worker and the sweeper
 * write at the same time. A reader that resumes by event id therefore gets every message
 * once, in seq order, across any number of reconnects.
 *
 * A stream whose messages are not the stored ones — Postgres restored to an earlier point while
 * Redis kept its newer state — would skip the new messages under the seqs of lost ones. The seq
 * key keeps its last message's fingerprint (seq and commit time); a job checks it against its
 * stored message on its first write, every writer notices a stream past its history, and
 * what Postgres confirms is dropped and written again from the start (`dropIfStale`).
 *
 * Retention: each write trims the stream to about `maxEvents` (MAXLEN ~) and to `maxAgeMs`
 * (MINID ~ on Redis's clock), and both keys expire `maxAgeMs` after the last write. Whether
 * an id is older than what is kept is decided by event-expiry.ts.
 */
import type { Redis } from "ioredis";
import type { Database } from "./db/client.js";
import { compareIds, placeExpired, STREAM_START, type StreamInfo } from "./event-expiry.js";
import type { StoredMessage } from "./messages.js";
import { isCluster } from "./redis.js";
import { json, messageFromRaw, type RawMessage } from "./store/rows.js";
import { keysShareSlot, TurnBatch } from "./turn-batch.js";

export const EVENT_TYPES = [
  "RUN_STARTED",
  "MESSAGE_DELTA",
  "MESSAGE",
  "TOOL_STARTED",
  "TOOL_FINISHED",
  "MODEL_STOPPED",
  "RUN_COMPLETED",
  "SESSION_PARKED",
] as const;
export type EventType = (typeof EVENT_TYPES)[number];

/** An event as written (without `sessionId`, added by the writer). */
export type SessionEventInput =
  | { type: "RUN_STARTED"; runId: string; kind: "run" | "resume"; resumeKind: string | null; trigger: string }
  | { type: "MESSAGE_DELTA"; runId: string; text: string }
  | { type: "MESSAGE"; runId: string | null; message: StoredMessage }
  | { type: "TOOL_STARTED"; runId: string; toolCallId: string; name: string }
  | { type: "TOOL_FINISHED"; runId: string; toolCallId: string; name: string; success: boolean }
  | { type: "MODEL_STOPPED"; runId: string; stopReason: string }
  | { type: "RUN_COMPLETED"; runId: string; outcome: string }
  | { type: "SESSION_PARKED"; reason: string };

export type SessionEvent = SessionEventInput & { sessionId: string };
/** An event as read: its id and its data. */
export type StoredEvent = { id: string; type: string; data: Record<string, unknown> };

export type EventRetention = { maxEvents: number; maxAgeMs: number };
export const DEFAULT_RETENTION: EventRetention = { maxEvents: 10_000, maxAgeMs: 24 * 3600 * 1000 };

export function eventStreamKey(prefix: string, sessionId: string): string {
  return `${prefix}:events:${sessionId}`;
}
function seqKey(prefix: string, sessionId: string): string {
  return `${prefix}:events-seq:${sessionId}`;
}
/** Where writers publish the key of a stream they wrote to, so that SSE readers look at once. */
export function eventsNotifyChannel(prefix: string): string {
  return `${prefix}:events-notify`;
}

/** A stream entry id's form, as clients send it back (`Last-Event-ID`, `?after=`). */
const EVENT_ID = /^\d{1,20}-\d{1,20}$/;
const U64_MAX = 2n ** 64n - 1n;

/**
 * Whether `value` is a stream entry id Redis takes as a place to read after: `ms-seq`, each
 * part an unsigned 64-bit number, and not the last id of all (nothing comes after it, and
 * Redis refuses a range that starts past it).
 */
export function isEventId(value: string): boolean {
  if (!EVENT_ID.test(value)) return false;
  const [ms, seq] = value.split("-") as [string, string];
  return BigInt(ms) < U64_MAX && BigInt(seq) <= U64_MAX;
}

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
 */
const APPEND_SCRIPT = `
local t = redis.call('TIME')
local minId = tostring(tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000) - tonumber(ARGV[2]))
-- seq, fingerprint, ended run, check
local function parse(arg)
  local head = string.sub(arg, 1, 2)
  if head == 'r:' then return 0, nil, string.sub(arg, 3), nil end
  if head == 'c:' then return 0, nil, nil, string.sub(arg, 3) end
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
  local head = redis.call('HMGET', seqKey, 'seq', 'deleted', 'off')
  local gone = head[2] or head[3]
  local last = tonumber(head[1] or '0')
  local prior = last
  local expect = last
  local gap = false
  local diverged = nil
  local mark = tostring(last) .. '|'
  for i = first, stop, 3 do
    local seq, _, _, check = parse(ARGV[i])
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
    for i = first, stop, 3 do
      local seq, fp, ended, check = parse(ARGV[i])
      if ended ~= nil and done == nil then done = redis.call('HGET', seqKey, 'done') end
      if check == nil and ((seq == 0 and (ended == nil or ended ~= done)) or seq > last) then
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
      redis.call('PEXPIRE', stream, ARGV[2])
      redis.call('PEXPIRE', seqKey, ARGV[2])
      redis.call('PUBLISH', ARGV[3], name)
    end
    results[w] = out
  end
end
return results
`;

/** A stored message's fingerprint: its seq and commit time, which no message of another history shares. */
export function fingerprint(message: Pick<StoredMessage, "seq" | "createdAt">): string {
  return `${message.seq}|${message.createdAt}`;
}

type RedisWithAppend = Redis & {
  fleetEventsAppendMany(numKeys: number, ...args: (string | number)[]): Promise<string[][]>;
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

/** Counts what is written, by type (`fleet_events_written_total`). */
export type EventsCounter = { inc(labels: { type: string }, value?: number): void };

/**
 * `prior`: the highest message seq the stream had before the write, `priorFingerprint` the
 * fingerprint of that message when the stream keeps it (`fingerprint`). `diverged`: the
 * fingerprint of the stream's last message (seq `last`), which is not the one the write's check
 * named (`writeEntries`).
 */
export type WriteResult =
  | { ok: true; ids: string[]; prior: number; priorFingerprint: string | null; deleted?: true }
  | { ok: false; last: number; diverged?: string };

/** An entry as the script takes it: its seq (0, or `r:RUN_ID`), its type, its data (JSON). */
type Row = [seq: number | string, type: string, data: string];

/** `check`: the stored message the writer believes the stream has last (APPEND_SCRIPT's CHECK). */
type SessionWrite = { sessionId: string; rows: readonly Row[]; bytes: number; check?: StoredMessage };

/**
 * The most one script call carries: a long write (the whole history replayed into a new
 * stream after an import or an expired stream: 14.5 MB at 10,000 messages of 1 KB) goes in
 * chunks of at most this many bytes of data and entries, each its own call, so that no call
 * holds Redis (single-threaded: every other client waits) for more than about a millisecond.
 */
export const WRITE_CHUNK = { bytes: 128 * 1024, entries: 256 };

/**
 * Where a write of entries of these sizes is cut into chunks (pure): the index each chunk
 * starts at. A chunk holds at most `limit.entries` entries and `limit.bytes` bytes, or one
 * entry heavier than that alone; the entries stay in their order.
 */
export function chunkStarts(sizes: readonly number[], limit = WRITE_CHUNK): number[] {
  const starts: number[] = [];
  let bytes = 0;
  let count = 0;
  sizes.forEach((size, i) => {
    if (count === 0 || count >= limit.entries || bytes + size > limit.bytes) {
      starts.push(i);
      bytes = 0;
      count = 0;
    }
    bytes += size;
    count++;
  });
  return starts;
}

/**
 * Drops a session's stream and its seq key when the seq key still says `ARGV[1]` and, when
 * `ARGV[3]` is not empty, its last message's fingerprint is still that (what the caller read
 * before it asked Postgres), and wakes its readers. KEYS: stream, seq key. ARGV: seq, channel,
 * fingerprint.
 */
const DROP_SCRIPT = `
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
const DROP_OFF_SCRIPT = `
if redis.call('HEXISTS', KEYS[2], 'deleted') == 1 then return 0 end
redis.call('DEL', KEYS[1], KEYS[2])
redis.call('HSET', KEYS[2], 'off', '1')
redis.call('PEXPIRE', KEYS[2], ARGV[2])
redis.call('PUBLISH', ARGV[1], KEYS[1])
return 1
`;

/** The `off` marker of DROP_OFF_SCRIPT removed (its stream turned on again); a tombstone stays. */
const ON_SCRIPT = `
if redis.call('HEXISTS', KEYS[1], 'deleted') == 1 then return 0 end
if redis.call('HEXISTS', KEYS[1], 'off') == 0 then return 0 end
return redis.call('DEL', KEYS[1])
`;

/** The `onDropped` of an EventWriter that says so in the log, once per stream dropped. */
export function warnDroppedStream(log: { warn(object: object, message: string): void }) {
  return (sessionId: string, streamSeq: number, storedSeq: number) =>
    log.warn(
      { sessionId, streamSeq, storedSeq },
      "the session's event stream had messages that are not the stored ones (Postgres restored from an earlier point?): dropped it and wrote it again from Postgres; readers resuming from before get 410",
    );
}

/** What Postgres has of a session: its highest message seq, and the fingerprint of its message `seq` (null: none). */
export type StoredState = { last: number; fingerprint: string | null };

export async function storedState(database: Database, sessionId: string, seq: number): Promise<StoredState> {
  // created_at as JSON, as every stored message read is (row_to_json), so its fingerprint is the same.
  const [row] = await database.sql<{ last: number; at: string | null }[]>`
    select (select coalesce(max(seq), 0)::int from messages where session_id = ${sessionId}) as last,
           (select to_json(created_at) from messages where session_id = ${sessionId} and seq = ${seq}) as at`;
  const at = row?.at ? new Date(row.at).toISOString() : null;
  return { last: row?.last ?? 0, fingerprint: at === null ? null : fingerprint({ seq, createdAt: at }) };
}

export class EventWriter {
  /**
   * Writes asked for in one turn of the event loop go to Redis together, in one script call
   * (turn-batch.ts): a worker running many sessions makes one call where it made one per
   * session and write.
   */
  private readonly batch: TurnBatch<SessionWrite, string[]>;

  constructor(
    private readonly redis: Redis,
    readonly prefix: string,
    private readonly retention: EventRetention = DEFAULT_RETENTION,
    private readonly counter?: EventsCounter,
    /** false: events are off (FLEET_EVENTS=off), every write is a no-op. */
    readonly enabled = true,
    /** How long a write waits for others to share its script call (TurnBatch's gatherMs). */
    gatherMs = 0,
    /**
     * `database`: where a job's log (SessionEventLog) confirms that a stream is not the stored
     * history (`dropIfStale`); `onDropped`: told of each stream dropped so (a log line).
     */
    private readonly store: {
      database?: Database;
      onDropped?: (sessionId: string, streamSeq: number, storedSeq: number) => void;
    } = {},
    /** The most one script call carries (WRITE_CHUNK; tests pass smaller limits to prove the chunking on less data). */
    private readonly chunk: { bytes: number; entries: number } = WRITE_CHUNK,
  ) {
    if (!(redis as unknown as Partial<RedisWithAppend>).fleetEventsAppendMany)
      redis.defineCommand("fleetEventsAppendMany", { lua: APPEND_SCRIPT });
    if (!(redis as unknown as Partial<RedisWithAppend>).fleetEventsDropStale)
      redis.defineCommand("fleetEventsDropStale", { numberOfKeys: 2, lua: DROP_SCRIPT });
    if (!(redis as unknown as Partial<RedisWithAppend>).fleetEventsDropOff)
      redis.defineCommand("fleetEventsDropOff", { numberOfKeys: 2, lua: DROP_OFF_SCRIPT });
    if (!(redis as unknown as Partial<RedisWithAppend>).fleetEventsOn)
      redis.defineCommand("fleetEventsOn", { numberOfKeys: 1, lua: ON_SCRIPT });
    this.batch = new TurnBatch(
      (writes) => this.send(writes),
      64,
      keysShareSlot(isCluster(redis), prefix),
      gatherMs,
      // Writes of several sessions share a call only up to one chunk's bytes.
      { of: (write) => write.bytes, max: chunk.bytes },
    );
  }

  /**
   * Drops the session's stream: its `sessionEvents` was turned off. Its seq key stays as an
   * `off` marker for FLEET_EVENTS_MAX_AGE_MS, so that a job that has not yet seen the change
   * (it learns it at its next append) writes nothing meanwhile.
   */
  async dropStream(sessionId: string): Promise<void> {
    if (!this.enabled) return;
    await (this.redis as unknown as RedisWithAppend).fleetEventsDropOff(
      eventStreamKey(this.prefix, sessionId),
      seqKey(this.prefix, sessionId),
      eventsNotifyChannel(this.prefix),
      this.retention.maxAgeMs,
    );
  }

  /**
   * Starts the session's stream again (its `sessionEvents` turned on): the `off` marker goes,
   * and every stored message is written (`writeAfterSync`).
   */
  async startStream(database: Database, sessionId: string): Promise<void> {
    if (!this.enabled) return;
    await (this.redis as unknown as RedisWithAppend).fleetEventsOn(seqKey(this.prefix, sessionId));
    await this.writeAfterSync(database, sessionId, []);
  }

  /** The highest message seq already in the session's stream (0: none, or the stream expired). */
  async lastSeq(sessionId: string): Promise<number> {
    if (!this.enabled) return 0;
    return Number((await this.redis.hget(seqKey(this.prefix, sessionId), "seq")) ?? 0);
  }

  /**
   * Writes `messages` (stored messages in seq order; those already in the stream are
   * skipped) and then `events`. Returns "gap" when the messages start after a seq the
   * stream lacks; the caller sends the missing ones too.
   */
  write(
    sessionId: string,
    messages: readonly { runId: string | null; message: StoredMessage }[],
    events: readonly SessionEventInput[],
  ): Promise<WriteResult> {
    return this.writeEntries(sessionId, [
      ...messages.map((m) => ({ type: "MESSAGE" as const, runId: m.runId, message: m.message })),
      ...events,
    ]);
  }

  /**
   * Writes `entries` in their order: `MESSAGE` entries (stored messages, in seq order; those
   * already in the stream are skipped) among other events. Returns "gap" when a message comes
   * after a seq the stream lacks; the caller sends the missing ones too.
   */
  async writeEntries(
    sessionId: string,
    entries: readonly SessionEventInput[],
    /** The stored message the writer believes the stream has last: "diverged" when it has another. */
    check?: StoredMessage,
  ): Promise<WriteResult> {
    if (!this.enabled || entries.length === 0) return { ok: true, ids: [], prior: 0, priorFingerprint: null };
    const rows = entries.map((event): Row => {
      const seq =
        event.type === "MESSAGE"
          ? fingerprint(event.message)
          : event.type === "RUN_COMPLETED"
            ? `r:${event.runId}`
            : 0;
      return [seq, event.type, JSON.stringify({ sessionId, ...event })];
    });
    // A long write goes in chunks, one call each, in order. Each chunk is checked against the
    // stream's seq like any write (a message already there is skipped, one after a gap
    // refused), so the chunks a writer that died left behind are the start of what the next
    // writer sends, and a reader between two chunks reads an ordinary stream that grows. The
    // writer's `check` goes with the first chunk: the later ones follow what it wrote.
    const sizes = rows.map((row) => Buffer.byteLength(row[2]) + 32);
    const starts = chunkStarts(sizes, this.chunk);
    const ids: string[] = [];
    let prior = 0;
    let priorFingerprint: string | null = null;
    for (const [n, start] of starts.entries()) {
      const end = starts[n + 1] ?? rows.length;
      const result = await this.batch.call({
        sessionId,
        rows: rows.slice(start, end),
        bytes: sizes.slice(start, end).reduce((sum, size) => sum + size, 0),
        ...(check && n === 0 ? { check } : {}),
      });
      // A gap is found in the first chunk (in a later one only if Redis lost the stream meanwhile).
      // The session was deleted: nothing is written, and nothing is to be repaired.
      if (result[0] === "deleted") return { ok: true, ids, prior: 0, priorFingerprint: null, deleted: true };
      if (result[0] === "gap") return { ok: false, last: Number(result[1]) };
      if (result[0] === "diverged") return { ok: false, last: Number(result[1]), diverged: result[2]! };
      if (n === 0) {
        prior = Number(result[1]);
        priorFingerprint = result[2] || null;
      }
      const written = result.slice(3);
      this.count(entries.slice(start, end), written.length);
      ids.push(...written);
    }
    return { ok: true, ids, prior, priorFingerprint };
  }

  /**
   * Drops the session's stream when its messages are not the stored ones: it has messages past
   * the stored ones (`seen`, its seq as read before `stored` was read from Postgres, is past
   * `stored.last`), or its last message (`seenFingerprint`, read with `seen`) is another
   * message than the stored one under that seq. Only a Postgres restored from a backup (or to
   * an earlier point in time) does that: messages enter a stream only after their commit, and
   * a stored message never changes. Those messages no longer exist, and the stream would skip
   * the new ones under their seqs (APPEND_SCRIPT), so the stream goes whole: the next write
   * starts it again with every stored message, and a reader whose place was in the old one
   * gets 410 (event-expiry.ts). Dropped only while the stream still says what was seen.
   */
  async dropIfStale(
    sessionId: string,
    seen: number,
    seenFingerprint: string | null,
    stored: StoredState,
  ): Promise<boolean> {
    const ahead = seen > stored.last;
    const other =
      seenFingerprint !== null && stored.fingerprint !== null && seenFingerprint !== stored.fingerprint;
    if (!this.enabled || !(ahead || other)) return false;
    const dropped = await (this.redis as unknown as RedisWithAppend).fleetEventsDropStale(
      eventStreamKey(this.prefix, sessionId),
      seqKey(this.prefix, sessionId),
      seen,
      eventsNotifyChannel(this.prefix),
      seenFingerprint ?? "",
    );
    if (dropped === 1) this.store.onDropped?.(sessionId, seen, stored.last);
    return dropped === 1;
  }

  /** `dropIfStale`, with what is stored read from `store.database` now. False without one. */
  async dropIfStaleInStore(
    sessionId: string,
    seen: number,
    seenFingerprint: string | null,
  ): Promise<boolean> {
    if (!this.store.database) return false;
    const stored = await storedState(this.store.database, sessionId, seen);
    return this.dropIfStale(sessionId, seen, seenFingerprint, stored);
  }

  private send(writes: SessionWrite[]): Promise<string[][]> {
    const keys: string[] = [];
    const args: (string | number)[] = [
      this.retention.maxEvents,
      this.retention.maxAgeMs,
      eventsNotifyChannel(this.prefix),
    ];
    for (const { sessionId, rows, check } of writes) {
      const stream = eventStreamKey(this.prefix, sessionId);
      keys.push(stream, seqKey(this.prefix, sessionId));
      args.push(stream, rows.length + (check ? 1 : 0));
      if (check) args.push(`c:${fingerprint(check)}`, "CHECK", "");
      for (const row of rows) args.push(...row);
    }
    return (this.redis as unknown as RedisWithAppend).fleetEventsAppendMany(keys.length, ...keys, ...args);
  }

  /** Counts the entries written: every non-message event, and the messages not skipped (the first ones). */
  private count(entries: readonly SessionEventInput[], written: number): void {
    if (!this.counter || written === 0) return;
    let skipped = entries.length - written;
    for (const event of entries) {
      if (event.type === "MESSAGE" && skipped > 0) {
        skipped--;
        continue;
      }
      this.counter.inc({ type: event.type });
    }
  }

  /**
   * The RUN_COMPLETED of the session's latest ended run, when it ended more than `graceMs`
   * ago (on Postgres's clock) and its stream lacks it: whoever ended the run died (or lost
   * Redis) between committing the end and writing the event. Written after the stored messages
   * the stream lacks, exactly like the sweeper's; a late writer's own RUN_COMPLETED for that
   * run is then skipped (APPEND_SCRIPT's `done`). Returns the run it wrote the end of, or null.
   */
  async missingRunEnd(database: Database, sessionId: string, graceMs: number): Promise<string | null> {
    if (!this.enabled) return null;
    // The latest ended run, unless a later run has started since (its RUN_STARTED is in the
    // stream: an end written now would come after it).
    const [run] = await database.sql<{ id: string; ended_reason: string | null; settled: boolean }[]>`
      select x.id, x.ended_reason,
             x.ended_at < now() - make_interval(secs => ${graceMs / 1000})
               and x.ended_at > now() - make_interval(secs => ${this.retention.maxAgeMs / 1000}) as settled
        from (select id, ended_reason, ended_at, created_at from runs
               where session_id = ${sessionId} and status = (select 'ended'::text)
               order by created_at desc, id desc limit 1) x
       where not exists (select 1 from runs y where y.session_id = ${sessionId}
                           and y.created_at > x.created_at and y.started_at is not null)
         -- A session created with sessionEvents: false has no stream to complete.
         and not exists (select 1 from sessions z where z.id = ${sessionId} and not z.session_events)`;
    // Ended too recently (its writer may be on its way), or so long ago that its stream expired.
    if (!run?.settled) return null;
    if ((await this.redis.hget(seqKey(this.prefix, sessionId), "done")) === run.id) return null;
    // A stream written before `done` was kept: its recent entries tell.
    const recent = (await this.redis.xrevrange(
      eventStreamKey(this.prefix, sessionId),
      "+",
      "-",
      "COUNT",
      RECENT_ENTRIES,
    )) as [string, string[]][];
    for (const row of recent) {
      const event = toStored(row);
      if (event.type === "RUN_COMPLETED" && event.data.runId === run.id) return null;
    }
    await this.writeAfterSync(database, sessionId, [
      { type: "RUN_COMPLETED", runId: run.id, outcome: run.ended_reason ?? "failed" },
    ]);
    return run.id;
  }

  /**
   * Writes `events` after every stored message the stream lacks, read from Postgres (the
   * sweeper's way, and anyone's without the history in memory).
   */
  async writeAfterSync(database: Database, sessionId: string, events: readonly SessionEventInput[]) {
    if (!this.enabled) return;
    for (let attempt = 0; attempt < 3; attempt++) {
      const last = await this.lastSeq(sessionId);
      // From the stream's last message on (checked: it must be the stored one), with the
      // highest stored seq: a stream past it has messages Postgres no longer has.
      const found = await database.sql<{ stored: number; off: boolean; m: string | RawMessage | null }[]>`
        select s.stored, s.off, row_to_json(m) as m
          from (select coalesce(max(seq), 0)::int as stored,
                       exists (select 1 from sessions z where z.id = ${sessionId} and not z.session_events) as off
                  from messages where session_id = ${sessionId}) s
          left join messages m on m.session_id = ${sessionId} and m.seq >= ${last} and not s.off
         order by m.seq`;
      // Created with sessionEvents: false: it has no stream, and none is started here.
      if (found[0]?.off) return;
      const stored = found[0]?.stored ?? 0;
      if (await this.dropIfStale(sessionId, last, null, { last: stored, fingerprint: null })) continue;
      const rows = found.flatMap((row) => {
        if (row.m === null) return [];
        const raw = json<RawMessage>(row.m);
        return [{ runId: raw.run_id, message: messageFromRaw(raw) }];
      });
      const check = rows[0]?.message.seq === last ? rows[0].message : undefined;
      const messages = rows.filter((row) => row.message.seq > last);
      const result = await this.writeEntries(
        sessionId,
        [
          ...messages.map((m) => ({ type: "MESSAGE" as const, runId: m.runId, message: m.message })),
          ...events,
        ],
        check,
      );
      if (result.ok) return;
      if (result.diverged !== undefined)
        await this.dropIfStale(
          sessionId,
          result.last,
          result.diverged,
          await storedState(database, sessionId, result.last),
        );
    }
    throw new Error(`session ${sessionId}: the event stream kept moving while it was synced`);
  }
}

/**
 * The events of one session as one worker job writes them: every write first carries the
 * stored messages of `history` the stream does not have yet (up to `through`, when given).
 * Writes go out one after the other, in the order they were asked for: what is asked for
 * while a write is on its way (or in the same turn of the event loop) goes out together in
 * the next one. A failed write (Redis away) is logged and its messages go with the next
 * one; it never stops the run. Text deltas are coalesced for up to DELTA_FLUSH_MS (best
 * effort, contracts §7).
 */
export class SessionEventLog {
  private chain: Promise<void> = Promise.resolve();
  /** What the next write carries, in order: for each part, the messages up to `through`, then its events. */
  private queued: { through: number; events: SessionEventInput[] }[] = [];
  /** The next write, while it is still gathering parts. */
  private next: Promise<void> | null = null;
  private deltas: { runId: string; text: string } | null = null;
  private deltaTimer: NodeJS.Timeout | null = null;

  constructor(
    private readonly writer: EventWriter,
    readonly sessionId: string,
    /** The job's history (stored messages), kept current by the job. */
    private readonly history: readonly StoredMessage[],
    /** Which run committed a message (null when not known: an earlier job's, or imported). */
    private readonly runOf: (message: StoredMessage) => string | null,
    private readonly onError: (error: unknown) => void,
    /** The highest message seq known to be in the stream (null: read it from Redis first). */
    private sent: number | null = null,
    /**
     * Whether the session has its stream (`sessionEvents`) as the job last learnt it: off, every
     * emit and delta is a no-op. `setOn` follows PATCH /v1/sessions/:id while the job runs.
     */
    private on = true,
  ) {}

  get enabled(): boolean {
    return this.writer.enabled;
  }

  /**
   * The session's `sessionEvents` as an append just read it. Turned on, the next write first
   * reads what the stream has (the API wrote the stored messages into it) and sends the rest;
   * turned off, nothing more is written and text not yet sent is dropped.
   */
  setOn(on: boolean): void {
    if (on === this.on) return;
    this.on = on;
    if (on) this.sent = null;
    else this.takeDeltas();
  }

  /**
   * Writes the messages the stream lacks (those with seq ≤ `through`; by default, those in
   * the history now), then `events`.
   */
  emit(events: SessionEventInput[] = [], through?: number): Promise<void> {
    if (!this.writer.enabled || !this.on) return Promise.resolve();
    // The text streamed so far goes first, on its own: it belongs to the step whose message
    // was just committed, so it comes before that MESSAGE, not after it.
    const deltas = this.takeDeltas();
    if (deltas) void this.enqueue(0, [deltas]);
    return this.enqueue(through ?? this.history.at(-1)?.seq ?? 0, events);
  }

  /**
   * `emit`, waited for at most `timeoutMs`: the writes stay queued in order, but a run never
   * waits long for Redis (an outage must not hold a run that Postgres already ended).
   */
  emitBounded(events: SessionEventInput[] = [], through?: number, timeoutMs = 1_000): Promise<void> {
    if (!this.writer.enabled || !this.on) return Promise.resolve();
    const written = this.emit(events, through);
    let timer: NodeJS.Timeout | undefined;
    const late = new Promise<void>((resolve) => {
      timer = setTimeout(resolve, timeoutMs);
    });
    return Promise.race([written, late]).finally(() => clearTimeout(timer));
  }

  /** A text delta of the model's current step (not awaited by the caller). */
  delta(runId: string, text: string): void {
    if (!this.writer.enabled || !this.on || text === "") return;
    if (this.deltas && this.deltas.runId === runId) this.deltas.text += text;
    else {
      const earlier = this.takeDeltas();
      if (earlier) void this.enqueue(0, [earlier]);
      this.deltas = { runId, text };
    }
    this.deltaTimer ??= setTimeout(() => {
      this.deltaTimer = null;
      const pending = this.takeDeltas();
      if (pending) void this.enqueue(0, [pending]);
    }, DELTA_FLUSH_MS);
  }

  private enqueue(through: number, events: SessionEventInput[]): Promise<void> {
    this.queued.push({ through, events });
    this.next ??= this.chain = this.chain.then(() => {
      this.next = null;
      const parts = this.queued;
      this.queued = [];
      return this.write(parts);
    });
    return this.next;
  }

  private takeDeltas(): SessionEventInput | null {
    if (this.deltaTimer) {
      clearTimeout(this.deltaTimer);
      this.deltaTimer = null;
    }
    const pending = this.deltas;
    this.deltas = null;
    return pending ? { type: "MESSAGE_DELTA", runId: pending.runId, text: pending.text } : null;
  }

  private async write(parts: readonly { through: number; events: SessionEventInput[] }[]): Promise<void> {
    try {
      // A seq read from the stream now is checked: its message must be the stored one.
      let checking = this.sent === null;
      this.sent ??= await this.writer.lastSeq(this.sessionId);
      // What the stream was believed to hold: should it have lost some of that (a gap), those
      // messages go before every part, also a part of text deltas (whose `through` is 0).
      const believed = this.sent;
      let dropped = false;
      for (let attempt = 0; attempt < 3; attempt++) {
        const entries: SessionEventInput[] = [];
        // The history is in seq order: the messages the stream lacks are its tail.
        let at = this.history.length;
        while (at > 0 && this.history[at - 1]!.seq > this.sent!) at--;
        let lastSent = this.sent!;
        for (const part of parts) {
          const through = Math.max(part.through, believed);
          for (; at < this.history.length && this.history[at]!.seq <= through; at++) {
            const message = this.history[at]!;
            entries.push({ type: "MESSAGE", runId: this.runOf(message), message });
            lastSent = message.seq;
          }
          entries.push(...part.events);
        }
        const sent = this.sent!;
        // Every write says which message it believes the stream has last: a seq read from the
        // stream just now must be that stored message, and a stream that has lost it (Redis
        // lost the stream, or it expired) is a gap, filled before the write's events.
        const check = sent > 0 ? this.history[sent - 1] : undefined;
        if (checking) checking = false;
        // What the job had stored when it wrote: the history grows while the write is on its
        // way (the next step commits), and compared with that, a stream holding lost messages
        // under the seqs just committed would look current.
        const stored = this.history.at(-1)?.seq ?? 0;
        const result = await this.writer.writeEntries(
          this.sessionId,
          entries,
          check?.seq === sent ? check : undefined,
        );
        // The stream had messages past every one this job has stored, or another message than
        // the stored one: while it holds the lease only a Postgres restored to an earlier point
        // does that (or this job lost its lease: Postgres, asked, says which). A dropped stream
        // is written again from the start.
        const stale =
          !dropped &&
          (result.ok
            ? result.prior > stored &&
              (await this.writer.dropIfStaleInStore(this.sessionId, result.prior, result.priorFingerprint))
            : result.diverged !== undefined &&
              (await this.writer.dropIfStaleInStore(this.sessionId, result.last, result.diverged)));
        if (stale) {
          dropped = true;
          this.sent = 0;
          continue;
        }
        if (result.ok) {
          this.sent = Math.max(sent, lastSent);
          return;
        }
        this.sent = result.last;
      }
    } catch (error) {
      this.sent = null;
      this.onError(error);
    }
  }
}

/** How far back `missingRunEnd` looks for a run's RUN_COMPLETED in a stream that has no `done`. */
const RECENT_ENTRIES = 20;

/** How long text deltas are gathered into one MESSAGE_DELTA. */
const DELTA_FLUSH_MS = 50;

/** Reads a session's stream for the SSE route. */
export class EventReader {
  constructor(
    private readonly redis: Redis,
    readonly prefix: string,
  ) {}

  /** Entries after `after` (exclusive), at most `count`. */
  async after(key: string, after: string, count = 200): Promise<StoredEvent[]> {
    const rows = (await this.redis.xrange(key, `(${after}`, "+", "COUNT", count)) as [string, string[]][];
    return rows.map(toStored);
  }

  /** The newest entry id, or null for an empty or missing stream. */
  async lastId(key: string): Promise<string | null> {
    const rows = (await this.redis.xrevrange(key, "+", "-", "COUNT", 1)) as [string, string[]][];
    return rows[0]?.[0] ?? null;
  }

  /** Entries from `from` (inclusive), at most `count`. */
  async from(key: string, from: string, count: number): Promise<StoredEvent[]> {
    const rows = (await this.redis.xrange(key, from, "+", "COUNT", count)) as [string, string[]][];
    return rows.map(toStored);
  }

  /**
   * Whether `after` is older than what is kept, or a place this stream never had (event-expiry.ts).
   * `isEntry` false: `after` is a place before an entry, not one (a stream read from a run's
   * start), judged by its position alone.
   */
  async expired(key: string, after: string, isEntry = true): Promise<boolean> {
    const stream = await this.streamInfo(key);
    if (stream === null || after === STREAM_START || !isEntry) return placeExpired(stream, after);
    return placeExpired(stream, after, await this.isEntry(key, after));
  }

  /**
   * Whether a place that is no longer an entry of the stream was lost rather than trimmed: it
   * is not before the first entry kept (event-expiry.ts), or it is and the stream never lost an
   * entry to trimming — the stream was started again after it (dropped and rebuilt).
   */
  async placeLost(key: string, place: string): Promise<boolean> {
    const stream = await this.streamInfo(key);
    if (stream === null || stream.firstId === null) return false;
    if (compareIds(place, stream.firstId) < 0) return stream.entriesAdded <= stream.length;
    return !(await this.isEntry(key, place));
  }

  private async isEntry(key: string, id: string): Promise<boolean> {
    return ((await this.redis.xrange(key, id, id, "COUNT", 1)) as unknown[]).length > 0;
  }

  private async streamInfo(key: string): Promise<StreamInfo> {
    let info: unknown[];
    try {
      info = (await this.redis.call("XINFO", "STREAM", key)) as unknown[];
    } catch (error) {
      if (/no such key/i.test((error as Error).message)) return null;
      throw error;
    }
    const field = (name: string) => {
      const at = info.indexOf(name);
      return at >= 0 ? info[at + 1] : undefined;
    };
    const length = Number(field("length") ?? 0);
    const first = (field("first-entry") as [string, unknown] | null | undefined)?.[0];
    return { length, entriesAdded: Number(field("entries-added") ?? length), firstId: first ?? null };
  }

  /** The id of the RUN_STARTED of `runId`, scanning back from the newest entry. */
  async runStartedId(key: string, runId: string): Promise<string | null> {
    let end = "+";
    for (let page = 0; page < 200; page++) {
      const rows = (await this.redis.xrevrange(key, end, "-", "COUNT", 100)) as [string, string[]][];
      for (const row of rows) {
        const event = toStored(row);
        if (event.type === "RUN_STARTED" && event.data.runId === runId) return event.id;
      }
      if (rows.length < 100) return null;
      end = `(${rows.at(-1)![0]}`;
    }
    return null;
  }
}

function toStored([id, fields]: [string, string[]]): StoredEvent {
  let type = "";
  let data = "{}";
  for (let i = 0; i < fields.length; i += 2) {
    if (fields[i] === "type") type = fields[i + 1]!;
    if (fields[i] === "data") data = fields[i + 1]!;
  }
  return { id, type, data: JSON.parse(data) as Record<string, unknown> };
}

/** The event id just before `id` in order (for "start at this event"). */
export function idBefore(id: string): string {
  const [ms, seq] = id.split("-").map(BigInt) as [bigint, bigint];
  if (seq > 0n) return `${ms}-${seq - 1n}`;
  if (ms === 0n) return "0-0";
  return `${ms - 1n}-18446744073709551615`;
}
