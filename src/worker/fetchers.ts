/**
 * How a worker process's slots of one queue are spread over BullMQ `Worker`s.
 *
 * A BullMQ `Worker` fetches jobs strictly one at a time: its main loop awaits each
 * `moveToActive` before it asks for the next, and with a full queue it hands none of them to
 * the processor until every one of its slots holds a job (docs/performance.md, "The start
 * ramp is two phases in series"). Several `Worker`s on the same
 * queue (one connection for their commands, one blocking connection each) fetch side by
 * side; their slots add up to the configured concurrency exactly, so the process never runs
 * more jobs than it was told. With `bench:scale`'s 1,000 sessions four fetchers start the
 * last session after 0.7 s instead of 1.1 s; below a few hundred slots one is as good.
 */

/** Slots one fetcher gets before another one pays off (the default: concurrency / 250, 1–4). */
export const SLOTS_PER_FETCHER = 250;
export const MAX_DEFAULT_FETCHERS = 4;

/** The fetchers of a queue with `concurrency` slots when WORKER_FETCHERS is not set. */
export function defaultFetchers(concurrency: number): number {
  return Math.min(MAX_DEFAULT_FETCHERS, Math.max(1, Math.ceil(concurrency / SLOTS_PER_FETCHER)));
}

/**
 * The concurrency of each of `fetchers` BullMQ Workers sharing `concurrency` slots: as even
 * as whole numbers allow, never an empty one, summing to `concurrency`.
 */
export function fetcherSlots(concurrency: number, fetchers: number): number[] {
  if (!Number.isInteger(concurrency) || concurrency < 1) throw new RangeError("concurrency must be ≥ 1");
  if (!Number.isInteger(fetchers) || fetchers < 1) throw new RangeError("fetchers must be ≥ 1");
  const n = Math.min(fetchers, concurrency);
  const base = Math.floor(concurrency / n);
  const extra = concurrency % n;
  return Array.from({ length: n }, (_, i) => base + (i < extra ? 1 : 0));
}
