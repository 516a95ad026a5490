/**
 * How EventWriter (event-writer.ts) cuts a long write into chunks, one script call each (pure).
 */

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
