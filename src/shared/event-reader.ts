/** EventReader: what the SSE route reads of a session's stream (events.ts). */
import type { Redis } from "ioredis";
import { compareIds, placeExpired, STREAM_START, type StreamInfo, trimmedPast } from "./event-expiry.js";
import { eventStreamKey, type StoredEvent, seqKey, toStored } from "./events.js";
import { MOST_LINKS, type RedisWithRunStarted, RUN_STARTED_SCRIPT } from "./run-started-script.js";

/** Reads a session's stream for the SSE route. */
export class EventReader {
  constructor(
    private readonly redis: Redis,
    readonly prefix: string,
  ) {
    if (!(redis as unknown as Partial<RedisWithRunStarted>).fleetRunStarted)
      redis.defineCommand("fleetRunStarted", { numberOfKeys: 2, lua: RUN_STARTED_SCRIPT });
  }

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

  /** The newest entry, or null for an empty or missing stream. */
  async last(key: string): Promise<StoredEvent | null> {
    const rows = (await this.redis.xrevrange(key, "+", "-", "COUNT", 1)) as [string, string[]][];
    return rows[0] ? toStored(rows[0]) : null;
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
    return this.lost(await this.streamInfo(key), key, place);
  }

  /**
   * Whether entries after a place that is no longer an entry of the stream may be gone: it was
   * lost (`placeLost`), or it was trimmed and the byte bound removed an entry after it too
   * (event-expiry.ts `trimmedPast`). A place trimmed by the byte bound with every entry after
   * it kept (a caught-up reader's place, trimmed for the one big event written after it) is not.
   */
  async placeGone(key: string, place: string): Promise<boolean> {
    const stream = await this.streamInfo(key);
    return (await this.lost(stream, key, place)) || trimmedPast(stream, place);
  }

  private async lost(stream: StreamInfo, key: string, place: string): Promise<boolean> {
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
    const maxDeleted = field("max-deleted-entry-id");
    return {
      length,
      entriesAdded: Number(field("entries-added") ?? length),
      firstId: first ?? null,
      maxDeletedId: typeof maxDeleted === "string" ? maxDeleted : null,
    };
  }

  /**
   * The id of the RUN_STARTED of `runId` while the session's stream keeps it: found from the
   * latest one written (noted in the seq key) back over run starts only (run-started-script.ts),
   * so an earlier run's (`?run=`) costs one entry per run started after it, and one trimmed away
   * is known gone without reading the rest. Where a stream holds no note or no link (written by
   * an earlier release), read back from there, as before.
   */
  async runStartedId(sessionId: string, runId: string): Promise<string | null> {
    const key = eventStreamKey(this.prefix, sessionId);
    const answer = await (this.redis as unknown as RedisWithRunStarted).fleetRunStarted(
      key,
      seqKey(this.prefix, sessionId),
      runId,
      MOST_LINKS,
    );
    if (answer[0] === "found") return answer[1];
    if (answer[0] === "gone") return null;
    return this.findBack(key, answer[1], "-", "RUN_STARTED", runId);
  }

  /**
   * The id of the RUN_COMPLETED of `runId`, a run that ended without starting (a cancel
   * dropped it while queued: its only event), read back from the stream's end over at most
   * 20,000 entries and none written before `notBeforeMs` (the run did not exist then); null
   * when not found there.
   */
  async runEndedId(sessionId: string, runId: string, notBeforeMs: number): Promise<string | null> {
    const key = eventStreamKey(this.prefix, sessionId);
    return this.findBack(key, "+", `${Math.max(0, notBeforeMs)}-0`, "RUN_COMPLETED", runId);
  }

  /**
   * The id of the first `type` event of `runId` read back from `end` to `start` (XREVRANGE
   * bounds) in pages of 100, over at most 200 pages (20,000 entries); null when not found there.
   */
  private async findBack(
    key: string,
    end: string,
    start: string,
    type: "RUN_STARTED" | "RUN_COMPLETED",
    runId: string,
  ): Promise<string | null> {
    for (let page = 0; page < 200; page++) {
      const rows = (await this.redis.xrevrange(key, end, start, "COUNT", 100)) as [string, string[]][];
      for (const row of rows) {
        const event = toStored(row);
        if (event.type === type && event.data.runId === runId) return event.id;
      }
      if (rows.length < 100) return null;
      end = `(${rows.at(-1)![0]}`;
    }
    return null;
  }
}
