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
 */

/** Compares two stream ids. */
export function compareIds(a: string, b: string): number {
  const [am, as] = a.split("-").map(BigInt) as [bigint, bigint];
  const [bm, bs] = b.split("-").map(BigInt) as [bigint, bigint];
  if (am !== bm) return am < bm ? -1 : 1;
  return as === bs ? 0 : as < bs ? -1 : 1;
}

/** What `XINFO STREAM` says of a stream; null when there is no stream under the key. */
export type StreamInfo = { length: number; entriesAdded: number; firstId: string | null } | null;

/** The id a reader sends to read a stream from its start. */
export const STREAM_START = "0-0";

export function placeExpired(stream: StreamInfo, after: string): boolean {
  if (stream === null) return after !== STREAM_START;
  const trimmed = stream.entriesAdded > stream.length;
  if (after === STREAM_START && !trimmed) return false;
  if (stream.firstId === null) return trimmed;
  return compareIds(after, stream.firstId) < 0;
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
