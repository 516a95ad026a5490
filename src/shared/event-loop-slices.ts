/**
 * Work over big arrays in slices, each its own turn of the event loop, so that other requests
 * (and timers, heartbeats) are served between them: the API parses, checks and serialises
 * imports of up to 50,000 messages (16 MiB), which in one go held its event loop for
 * hundreds of milliseconds at a stretch (bench/big-bodies.ts). What comes out is the same as
 * in one go, and so are the errors (the slices go in order).
 */

/** Items one slice holds: about 1 MB of messages, a few milliseconds of work. */
export const SLICE_ITEMS = 500;

/** Resolves at the next turn of the event loop, after the I/O waiting meanwhile. */
export function nextTurn(): Promise<void> {
  return new Promise((resolve) => setImmediate(resolve));
}

/** `JSON.stringify(items)` (the same text), SLICE_ITEMS items a turn. */
export async function stringifyInSlices(items: readonly unknown[]): Promise<string> {
  if (items.length <= SLICE_ITEMS) return JSON.stringify(items);
  const parts: string[] = [];
  for (let start = 0; start < items.length; start += SLICE_ITEMS) {
    if (start > 0) await nextTurn();
    parts.push(JSON.stringify(items.slice(start, start + SLICE_ITEMS)).slice(1, -1));
  }
  return `[${parts.join(",")}]`;
}

/** `items.map(fn)` (fn gets each item's index in `items`), SLICE_ITEMS items a turn. */
export async function mapInSlices<T, R>(
  items: readonly T[],
  fn: (item: T, index: number) => R,
): Promise<R[]> {
  const out: R[] = new Array(items.length);
  for (let start = 0; start < items.length; start += SLICE_ITEMS) {
    if (start > 0) await nextTurn();
    const end = Math.min(items.length, start + SLICE_ITEMS);
    for (let i = start; i < end; i++) out[i] = fn(items[i]!, i);
  }
  return out;
}
