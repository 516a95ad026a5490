/** Runs `fn` over `items`, at most `limit` at a time, none started once `signal` is aborted. */
export async function forEachLimit<T>(
  items: Iterable<T>,
  limit: number,
  fn: (item: T) => Promise<void>,
  signal?: AbortSignal,
): Promise<void> {
  const iterator = items[Symbol.iterator]();
  const lane = async () => {
    for (let next = iterator.next(); !next.done && !signal?.aborted; next = iterator.next())
      await fn(next.value);
  };
  await Promise.all(Array.from({ length: limit }, lane));
}
