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
 * Retention: each write trims the stream to about `maxEvents` (MAXLEN ~), to `maxAgeMs`
 * (MINID ~ on Redis's clock) and to `maxBytes` of its entries' type and data (oldest first,
 * the newest kept: event-scripts.ts TRIM_BYTES), and both keys expire `maxAgeMs` after the
 * last write. Whether an id is older than what is kept is decided by event-expiry.ts.
 *
 * The parts: event-scripts.ts (the Lua scripts), event-writer.ts (EventWriter: every write,
 * chunking and repairs, with event-write-chunks.ts and event-stored-state.ts),
 * session-event-log.ts (SessionEventLog: one worker job's events, in
 * order) and event-reader.ts (EventReader: what the SSE route reads).
 */
import type { StoredMessage } from "./messages.js";

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
  | {
      type: "RUN_COMPLETED";
      runId: string;
      outcome: string;
      /**
       * The run's end time (ISO 8601, its runs row's `ended_at`), on an end written late by a
       * repair (event-writer.ts `missingRunEnd`), whose `at` is the repair's time.
       */
      endedAt?: string;
    }
  | {
      type: "SESSION_PARKED";
      reason: string;
      /**
       * The run whose end parked the session, when one did (written in the data, an addition to
       * §7): a client that read the parking but not that run's events knows it by its run, and
       * a re-read of the stream does not yield it, or that run, again (stream-reread.ts).
       */
      runId?: string;
      /**
       * The parking it announces (park-announcements.ts), when known: the stream takes one
       * SESSION_PARKED per parking, whoever writes it how often. Not written in the event's data.
       */
      parkId?: string;
    };

export type SessionEvent = SessionEventInput & { sessionId: string };
/** An event as read: its id and its data. */
export type StoredEvent = { id: string; type: string; data: Record<string, unknown> };

/**
 * `maxBytes`: the most a stream holds of its entries' type and data (event-scripts.ts
 * TRIM_BYTES; the newest entry is kept whatever its size); absent or 0: no byte bound.
 */
export type EventRetention = { maxEvents: number; maxAgeMs: number; maxBytes?: number };
export const DEFAULT_RETENTION: EventRetention = {
  maxEvents: 10_000,
  maxAgeMs: 24 * 3600 * 1000,
  maxBytes: 16 * 1024 * 1024,
};

export function eventStreamKey(prefix: string, sessionId: string): string {
  return `${prefix}:events:${sessionId}`;
}
/** The hash that keeps a stream's last message seq, fingerprint and ended run (APPEND_SCRIPT). */
export function seqKey(prefix: string, sessionId: string): string {
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
 * An event id (one `isEventId` accepts) in the spelling Redis gives its entries: without
 * leading zeros, so that the route compares it as text with what it reads (`007-0` is
 * entry `7-0`, and was sent again to a reader resuming after it).
 */
export function canonicalEventId(value: string): string {
  const [ms, seq] = value.split("-") as [string, string];
  return `${BigInt(ms)}-${BigInt(seq)}`;
}

/** A stored message's fingerprint: its seq and commit time, which no message of another history shares. */
export function fingerprint(message: Pick<StoredMessage, "seq" | "createdAt">): string {
  return `${message.seq}|${message.createdAt}`;
}

/**
 * When the event `id` entered its stream, as ISO 8601 on Redis's clock: a stream entry id's
 * first part is the milliseconds at which Redis added it (every writer uses `XADD … *`).
 * The SSE route sends it as `data.at` (an addition to §7), so a reader prints an event's own
 * time, not the time it read it. Null for an id of another form.
 */
export function eventTime(id: string): string | null {
  const ms = Number(id.split("-")[0]);
  return /^\d{1,15}-\d+$/.test(id) && ms <= 8.64e15 ? new Date(ms).toISOString() : null;
}

export function toStored([id, fields]: [string, string[]]): StoredEvent {
  let type = "";
  let data = "{}";
  for (let i = 0; i < fields.length; i += 2) {
    if (fields[i] === "type") type = fields[i + 1]!;
    if (fields[i] === "data") data = fields[i + 1]!;
  }
  return { id, type, data: JSON.parse(data) as Record<string, unknown> };
}
