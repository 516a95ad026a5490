/**
 * EventStreamWrites: writes session event streams (events.ts) to Redis: the writes of many
 * sessions in one script call, a long write in chunks, and a stream dropped (its events turned
 * off, or not the stored history). EventWriter (event-writer.ts) adds the repairs and syncs
 * that read the stored history from Postgres.
 */
import type { Redis } from "ioredis";
import type { Database } from "./db/client.js";
import { entryKey } from "./event-entry-key.js";
import { APPEND_SCRIPT, type AppendReply, type RedisWithAppend } from "./event-scripts.js";
import type { StoredState } from "./event-stored-state.js";
import { DROP_OFF_SCRIPT, DROP_SCRIPT, FLOOR_SCRIPT, ON_SCRIPT } from "./event-stream-scripts.js";
import { chunkStarts, WRITE_CHUNK } from "./event-write-chunks.js";
import {
  DEFAULT_RETENTION,
  type EventRetention,
  eventStreamKey,
  eventsNotifyChannel,
  fingerprint,
  type SessionEventInput,
  seqKey,
} from "./events.js";
import type { StoredMessage } from "./messages.js";
import { isCluster } from "./redis.js";
import { ScriptCall } from "./script-call.js";
import { keysShareSlot, TurnBatch } from "./turn-batch.js";

/** The event writes' script (one per process: it remembers which connections have loaded it). */
const APPEND = new ScriptCall(APPEND_SCRIPT);

/** Counts what is written, by type (`fleet_events_written_total`). */
export type EventsCounter = { inc(labels: { type: string }, value?: number): void };

/**
 * `prior`: the highest message seq the stream had before the write, `priorFingerprint` the
 * fingerprint of that message when the stream keeps it (`fingerprint`). `diverged`: the
 * fingerprint of the stream's last message (seq `last`), which is not the one the write's check
 * named (`writeEntries`). `written`: the entries the stream took (messages it had already are
 * skipped); their ids are not read back (a reader finds them in the stream).
 */
export type WriteResult =
  | { ok: true; written: number; prior: number; priorFingerprint: string | null; deleted?: true }
  | { ok: false; last: number; diverged?: string };

/**
 * An entry as the script takes it is three of these in a row: its seq (0, `r:RUN_ID`, `s:RUN_ID`, `k:PARK_ID` or `d:RUN_ID`), its
 * type, its data (JSON).
 */
type Row = number | string;

/**
 * `rows`: the entries, three values each (Row). `check`: the stored message the writer
 * believes the stream has last (APPEND_SCRIPT's CHECK).
 */
type SessionWrite = { sessionId: string; rows: readonly Row[]; bytes: number; check?: StoredMessage };

export class EventStreamWrites {
  /**
   * Writes asked for in one turn of the event loop go to Redis together, in one script call
   * (turn-batch.ts): a worker running many sessions makes one call where it made one per
   * session and write.
   */
  private readonly batch: TurnBatch<SessionWrite, AppendReply>;

  constructor(
    protected readonly redis: Redis,
    readonly prefix: string,
    protected readonly retention: EventRetention = DEFAULT_RETENTION,
    private readonly counter?: EventsCounter,
    /** false: events are off (FLEET_EVENTS=off), every write is a no-op. */
    readonly enabled = true,
    /** How long a write waits for others to share its script call (TurnBatch's gatherMs). */
    gatherMs = 0,
    /**
     * `database`: where a job's log (SessionEventLog) confirms that a stream is not the stored
     * history (`dropIfStale`); `onDropped`: told of each stream dropped so (a log line).
     */
    protected readonly store: {
      database?: Database;
      onDropped?: (sessionId: string, streamSeq: number, storedSeq: number) => void;
    } = {},
    /** The most one script call carries (WRITE_CHUNK; tests pass smaller limits to prove the chunking on less data). */
    private readonly chunk: { bytes: number; entries: number } = WRITE_CHUNK,
  ) {
    if (!(redis as unknown as Partial<RedisWithAppend>).fleetEventsDropStale)
      redis.defineCommand("fleetEventsDropStale", { numberOfKeys: 2, lua: DROP_SCRIPT });
    if (!(redis as unknown as Partial<RedisWithAppend>).fleetEventsDropOff)
      redis.defineCommand("fleetEventsDropOff", { numberOfKeys: 2, lua: DROP_OFF_SCRIPT });
    if (!(redis as unknown as Partial<RedisWithAppend>).fleetEventsOn)
      redis.defineCommand("fleetEventsOn", { numberOfKeys: 1, lua: ON_SCRIPT });
    if (!(redis as unknown as Partial<RedisWithAppend>).fleetEventsFloor)
      redis.defineCommand("fleetEventsFloor", { numberOfKeys: 2, lua: FLOOR_SCRIPT });
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
    if (!this.enabled || entries.length === 0)
      return { ok: true, written: 0, prior: 0, priorFingerprint: null };
    // One flat array of (seq, type, data) triples, filled by push, not by `.map`: arrays `.map`
    // makes have one elements kind when V8 runs it as a builtin and another when optimized code
    // inlines it, and each new kind seen here threw this function's optimized code away and had
    // V8 compile it again (twice per worker).
    const rows: Row[] = [];
    const sizes: number[] = [];
    let bytes = 0;
    for (const event of entries) {
      const seq = entryKey(event);
      // The spread copy costs less than the event's own JSON glued after a head: that string
      // is flattened again (Buffer.byteLength, the socket), which costs more than the copy.
      const data =
        event.type === "SESSION_PARKED"
          ? JSON.stringify({ sessionId, type: event.type, runId: event.runId, reason: event.reason })
          : JSON.stringify({ sessionId, ...event });
      rows.push(seq, event.type, data);
      const size = Buffer.byteLength(data) + 32;
      sizes.push(size);
      bytes += size;
    }
    // A long write goes in chunks, one call each, in order. Each chunk is checked against the
    // stream's seq like any write (a message already there is skipped, one after a gap
    // refused), so the chunks a writer that died left behind are the start of what the next
    // writer sends, and a reader between two chunks reads an ordinary stream that grows. The
    // writer's `check` goes with the first chunk: the later ones follow what it wrote.
    // Most writes are one chunk: sent as they are, with no copies of their rows and sizes.
    const single = entries.length <= this.chunk.entries && bytes <= this.chunk.bytes;
    const starts = single ? [0] : chunkStarts(sizes, this.chunk);
    let written = 0;
    let prior = 0;
    let priorFingerprint: string | null = null;
    for (let n = 0; n < starts.length; n++) {
      const start = starts[n]!;
      const end = starts[n + 1] ?? entries.length;
      let chunkBytes = bytes;
      if (!single) {
        chunkBytes = 0;
        for (let i = start; i < end; i++) chunkBytes += sizes[i]!;
      }
      const result = await this.batch.call({
        sessionId,
        rows: single ? rows : rows.slice(3 * start, 3 * end),
        bytes: chunkBytes,
        ...(check && n === 0 ? { check } : {}),
      });
      // A gap is found in the first chunk (in a later one only if Redis lost the stream meanwhile).
      // The session was deleted: nothing is written, and nothing is to be repaired.
      if (result[0] === "deleted") {
        // Unless Postgres has the session again (restored from before its delete): its
        // tombstone and deleted stream went, and the stream starts again, as a lost one does.
        if (n === 0 && (await this.droppedRestoredTombstone(sessionId))) return { ok: false, last: 0 };
        return { ok: true, written, prior: 0, priorFingerprint: null, deleted: true };
      }
      if (result[0] === "gap") return { ok: false, last: Number(result[1]) };
      if (result[0] === "diverged")
        return { ok: false, last: Number(result[1]), diverged: String(result[2]) };
      if (n === 0) {
        prior = Number(result[1]);
        priorFingerprint = (result[2] as string) || null;
      }
      const took = Number(result[3]);
      written += took;
      this.count(entries, start, end, took);
    }
    return { ok: true, written, prior, priorFingerprint };
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

  /** Whether a tombstone met by a write was a restored session's, and went (EventWriter). */
  protected droppedRestoredTombstone(_sessionId: string): Promise<boolean> {
    return Promise.resolve(false);
  }

  private send(writes: SessionWrite[]): Promise<AppendReply[]> {
    // The script's keys and then its arguments, in one array, whose bytes ScriptCall writes
    // once into the Buffer the socket sends (ioredis's own command is a string built argument by
    // argument, then encoded again: 8 % of what a worker allocated per session).
    const args: (string | number)[] = [];
    for (const { sessionId } of writes)
      args.push(eventStreamKey(this.prefix, sessionId), seqKey(this.prefix, sessionId));
    args.push(
      this.retention.maxEvents,
      this.retention.maxAgeMs,
      eventsNotifyChannel(this.prefix),
      this.retention.maxBytes ?? 0,
    );
    for (let w = 0; w < writes.length; w++) {
      const { rows, check } = writes[w]!;
      args.push(args[2 * w]!, rows.length / 3 + (check ? 1 : 0));
      if (check) args.push(`c:${fingerprint(check)}`, "CHECK", "");
      for (const value of rows) args.push(value);
    }
    return APPEND.call<AppendReply[]>(this.redis, 2 * writes.length, args);
  }

  /** Counts what of `entries[start, end)` was written: non-message events, messages not skipped. */
  private count(entries: readonly SessionEventInput[], start: number, end: number, written: number): void {
    if (!this.counter || written === 0) return;
    let skipped = end - start - written;
    for (let i = start; i < end; i++) {
      const event = entries[i]!;
      if (event.type === "MESSAGE" && skipped > 0) {
        skipped--;
        continue;
      }
      this.counter.inc({ type: event.type });
    }
  }
}
