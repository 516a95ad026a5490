/**
 * Whether a reader's place in an event stream (the id it resumes after) is older than what
 * is kept (contracts §7: `410 expired`). Pure: decided from what `XINFO STREAM` says.
 *
 * Entries leave a stream in two ways. Trimming (MAXLEN ~ / MINID ~) removes the oldest ones.
 * And a stream with no write for `maxAgeMs` expires whole: the next writer starts a new one
 * under the same key, a session's with every stored message (events.ts), a batch's with every
 * session end. Its ids are all newer than any of the old stream's, and its counters start
 * again, so only the ids tell: a place before the first entry kept is a place whose events
 * may be gone, or be written again — unless the stream never lost an entry and the reader
 * asks for all of it (`0-0`).
 *
 * A place from the first entry kept on is one of the stream's own entries: trimming removes
 * only the oldest, and nothing else deletes one. A place there that is not an entry is one
 * this stream never issued: it came from a stream since lost — Redis restored from an older
 * snapshot, a replica promoted before it had the newest entries, or a stream dropped because
 * it was ahead of a Postgres restored from a backup (events.ts). What follows it here is not
 * what followed it there (the messages after the lost entries are written again under new
 * ids), so it is gone too.
 */

/** Compares two stream ids. */
export function compareIds(a: string, b: string): number {
  const [am, as] = a.split("-").map(BigInt) as [bigint, bigint];
  const [bm, bs] = b.split("-").map(BigInt) as [bigint, bigint];
  if (am !== bm) return am < bm ? -1 : 1;
  return as === bs ? 0 : as < bs ? -1 : 1;
}

/**
 * What `XINFO STREAM` says of a stream; null when there is no stream under the key.
 * `maxDeletedId`: the newest entry removed by XDEL (trimming does not set it; the byte bound
 * removes its newest entry so, event-scripts.ts TRIM_BYTES); "0-0": none; null: not known
 * (Redis before 7).
 */
export type StreamInfo = {
  length: number;
  entriesAdded: number;
  firstId: string | null;
  maxDeletedId?: string | null;
} | null;

/** The id a reader sends to read a stream from its start. */
export const STREAM_START = "0-0";

/**
 * `isEntry`: whether `after` is an entry of the stream (asked only when the rest cannot
 * decide; callers that cannot ask pass nothing and get the decision by position alone).
 */
export function placeExpired(stream: StreamInfo, after: string, isEntry = true): boolean {
  if (stream === null) return after !== STREAM_START;
  const trimmed = stream.entriesAdded > stream.length;
  if (after === STREAM_START) return trimmed;
  if (stream.firstId === null) return trimmed || !isEntry;
  if (compareIds(after, stream.firstId) < 0) return true;
  return !isEntry;
}

/**
 * Whether an open stream's place may have expired since: only a stream with no write for
 * `maxAgeMs` expires whole, so a reader whose last entry is younger than that (less a margin
 * for the clocks of the API and Redis, which stamps the ids) need not ask.
 */
export function placeMayHaveExpired(after: string, maxAgeMs: number, nowMs: number): boolean {
  if (after === STREAM_START) return false;
  const writtenAt = Number(after.split("-")[0]);
  const margin = Math.min(maxAgeMs / 2, 60_000);
  return nowMs - writtenAt >= maxAgeMs - margin;
}

/**
 * Whether a reader whose place is no longer an entry of the stream (it was trimmed, not lost:
 * `placeLost` said so) may have lost entries after it: the byte bound removed one past it. The
 * count and age bounds are judged apart (event-stream.ts). Not known (Redis before 7): yes.
 */
export function trimmedPast(stream: StreamInfo, place: string): boolean {
  if (stream === null) return false;
  if (stream.maxDeletedId === undefined || stream.maxDeletedId === null) return true;
  return compareIds(stream.maxDeletedId, place) > 0;
}
