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
 * Retention: each write trims the stream to about `maxEvents` (MAXLEN ~) and to `maxAgeMs`
 * (MINID ~ on Redis's clock), and both keys expire `maxAgeMs` after the last write. Whether
 * an id is older than what is kept is decided by event-expiry.ts.
 */
import type { Redis } from "ioredis";
import type { Database } from "./db/client.js";
import { placeExpired, type StreamInfo } from "./event-expiry.js";
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
 * its entry count n, then n × (seq (0 for other events; `r:RUN_ID` for a RUN_COMPLETED), type,
 * data). The writes are applied in order, each against its session's seq as the writes before
 * it left it. A run's RUN_COMPLETED is written once: the seq key keeps the run last written
 * one (`done`), and a second one for that run is skipped (a late writer after a repair, see
 * `missingRunEnd`). Returns, per write, {"ok", ids...} or {"gap", last}.
 */
const APPEND_SCRIPT = `
local t = redis.call('TIME')
local minId = tostring(tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000) - tonumber(ARGV[2]))
local results = {}
local a = 4
for w = 1, #KEYS / 2 do
  local stream, seqKey = KEYS[2 * w - 1], KEYS[2 * w]
  local name, first = ARGV[a], a + 2
  local stop = first + 3 * tonumber(ARGV[a + 1]) - 1
  a = stop + 1
  local last = tonumber(redis.call('HGET', seqKey, 'seq') or '0')
  local expect = last
  local gap = false
  for i = first, stop, 3 do
    local seq = tonumber(ARGV[i]) or 0
    if seq > expect then
      if seq ~= expect + 1 then gap = true break end
      expect = seq
    end
  end
  if gap then
    results[w] = {'gap', tostring(last)}
  else
    local out = {'ok'}
    -- The run whose RUN_COMPLETED the stream has last: read only for a write that ends a run.
    local done, ends = nil, nil
    for i = first, stop, 3 do
      local seq = tonumber(ARGV[i])
      local ended = nil
      if seq == nil then
        ended, seq = string.sub(ARGV[i], 3), 0
        if done == nil then done = redis.call('HGET', seqKey, 'done') end
      end
      if (seq == 0 and (ended == nil or ended ~= done)) or seq > last then
        out[#out + 1] = redis.call('XADD', stream, 'MAXLEN', '~', ARGV[1], '*', 'type', ARGV[i + 1], 'data', ARGV[i + 2])
        if seq > 0 then last = seq end
        if ended ~= nil then done, ends = ended, ended end
      end
    end
    if #out > 1 then
      redis.call('XTRIM', stream, 'MINID', '~', minId)
      redis.call('HSET', seqKey, 'seq', tostring(last))
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

type RedisWithAppend = Redis & {
  fleetEventsAppendMany(numKeys: number, ...args: (string | number)[]): Promise<string[][]>;
};

/** Counts what is written, by type (`fleet_events_written_total`). */
export type EventsCounter = { inc(labels: { type: string }, value?: number): void };

export type WriteResult = { ok: true; ids: string[] } | { ok: false; last: number };

/** An entry as the script takes it: its seq (0, or `r:RUN_ID`), its type, its data (JSON). */
type Row = [seq: number | string, type: string, data: string];

type SessionWrite = { sessionId: string; rows: readonly Row[]; bytes: number };

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
  ) {
    if (!(redis as unknown as Partial<RedisWithAppend>).fleetEventsAppendMany)
      redis.defineCommand("fleetEventsAppendMany", { lua: APPEND_SCRIPT });
    this.batch = new TurnBatch(
      (writes) => this.send(writes),
      64,
      keysShareSlot(isCluster(redis), prefix),
      gatherMs,
      // Writes of several sessions share a call only up to one chunk's bytes.
      { of: (write) => write.bytes, max: WRITE_CHUNK.bytes },
    );
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
  async writeEntries(sessionId: string, entries: readonly SessionEventInput[]): Promise<WriteResult> {
    if (!this.enabled || entries.length === 0) return { ok: true, ids: [] };
    const rows = entries.map((event): Row => {
      const seq =
        event.type === "MESSAGE"
          ? event.message.seq
          : event.type === "RUN_COMPLETED"
            ? `r:${event.runId}`
            : 0;
      return [seq, event.type, JSON.stringify({ sessionId, ...event })];
    });
    // A long write goes in chunks, one call each, in order. Each chunk is checked against the
    // stream's seq like any write (a message already there is skipped, one after a gap
    // refused), so the chunks a writer that died left behind are the start of what the next
    // writer sends, and a reader between two chunks reads an ordinary stream that grows.
    const sizes = rows.map((row) => Buffer.byteLength(row[2]) + 32);
    const starts = chunkStarts(sizes);
    const ids: string[] = [];
    for (const [n, start] of starts.entries()) {
      const end = starts[n + 1] ?? rows.length;
      const chunk = rows.slice(start, end);
      const result = await this.batch.call({
        sessionId,
        rows: chunk,
        bytes: sizes.slice(start, end).reduce((sum, size) => sum + size, 0),
      });
      // A gap is found in the first chunk (in a later one only if Redis lost the stream meanwhile).
      if (result[0] === "gap") return { ok: false, last: Number(result[1]) };
      const written = result.slice(1);
      this.count(entries.slice(start, end), written.length);
      ids.push(...written);
    }
    return { ok: true, ids };
  }

  private send(writes: SessionWrite[]): Promise<string[][]> {
    const keys: string[] = [];
    const args: (string | number)[] = [
      this.retention.maxEvents,
      this.retention.maxAgeMs,
      eventsNotifyChannel(this.prefix),
    ];
    for (const { sessionId, rows } of writes) {
      const stream = eventStreamKey(this.prefix, sessionId);
      keys.push(stream, seqKey(this.prefix, sessionId));
      args.push(stream, rows.length);
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
                           and y.created_at > x.created_at and y.started_at is not null)`;
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
      const rows = await database.sql<{ m: string | RawMessage }[]>`
        select row_to_json(m) as m from messages m where m.session_id = ${sessionId} and m.seq > ${last}
         order by m.seq`;
      const messages = rows.map((row) => {
        const raw = json<RawMessage>(row.m);
        return { runId: raw.run_id, message: messageFromRaw(raw) };
      });
      const result = await this.write(sessionId, messages, events);
      if (result.ok) return;
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
  ) {}

  get enabled(): boolean {
    return this.writer.enabled;
  }

  /**
   * Writes the messages the stream lacks (those with seq ≤ `through`; by default, those in
   * the history now), then `events`.
   */
  emit(events: SessionEventInput[] = [], through?: number): Promise<void> {
    if (!this.writer.enabled) return Promise.resolve();
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
    const written = this.emit(events, through);
    let timer: NodeJS.Timeout | undefined;
    const late = new Promise<void>((resolve) => {
      timer = setTimeout(resolve, timeoutMs);
    });
    return Promise.race([written, late]).finally(() => clearTimeout(timer));
  }

  /** A text delta of the model's current step (not awaited by the caller). */
  delta(runId: string, text: string): void {
    if (!this.writer.enabled || text === "") return;
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
      this.sent ??= await this.writer.lastSeq(this.sessionId);
      for (let attempt = 0; attempt < 2; attempt++) {
        const entries: SessionEventInput[] = [];
        // The history is in seq order: the messages the stream lacks are its tail.
        let at = this.history.length;
        while (at > 0 && this.history[at - 1]!.seq > this.sent!) at--;
        let lastSent = this.sent!;
        for (const part of parts) {
          for (; at < this.history.length && this.history[at]!.seq <= part.through; at++) {
            const message = this.history[at]!;
            entries.push({ type: "MESSAGE", runId: this.runOf(message), message });
            lastSent = message.seq;
          }
          entries.push(...part.events);
        }
        const result = await this.writer.writeEntries(this.sessionId, entries);
        if (result.ok) {
          this.sent = Math.max(this.sent!, lastSent);
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

  /** Whether `after` is older than what is kept (event-expiry.ts). */
  async expired(key: string, after: string): Promise<boolean> {
    return placeExpired(await this.streamInfo(key), after);
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
