/**
 * Webhook host names are looked up a few at a time.
 *
 * Node's `dns.lookup` (what an http request uses for a host name) runs getaddrinfo on libuv's
 * thread pool, four threads shared with everything else of the process: its file-system
 * calls, and the lookups of its own Postgres and Redis host names when it reconnects. A
 * tenant's webhook host whose DNS server never answers holds a thread for the resolver's
 * whole timeout, well past the delivery's own deadline (the request is given up, the lookup
 * is not), and eight deliveries at once could hold all four: a sweeper that lost Redis then
 * could not look its host up again until they returned. So at most LOOKUPS_AT_ONCE webhook
 * lookups run at a time, counted until each returns; the rest wait their turn (at most their
 * delivery's deadline), and the pool keeps threads for the rest of the process.
 */
import type { LookupFunction } from "node:net";

/** Webhook lookups running at once, of libuv's 4 threads. */
export const LOOKUPS_AT_ONCE = 2;

/**
 * `base`, with at most `max` of its calls running at once (the others queued, in order). A
 * call still waiting after `maxWaitMs` (its delivery's deadline: the delivery has given up)
 * is answered ETIMEOUT and taken out of the queue, never run: before, it waited for good and
 * ran later, so a tenant's host whose DNS never answers queued every delivery's lookup, every
 * tenant's, behind ever more abandoned ones.
 */
export function limitLookups(
  base: LookupFunction,
  max = LOOKUPS_AT_ONCE,
  maxWaitMs = 10_000,
): LookupFunction {
  let running = 0;
  const waiting: { run: () => void; timer: NodeJS.Timeout }[] = [];
  const start = (run: () => void) => {
    running++;
    run();
  };
  return (hostname, options, callback) => {
    const run = () =>
      base(hostname, options, ((...args: Parameters<typeof callback>) => {
        running--;
        const next = waiting.shift();
        if (next) {
          clearTimeout(next.timer);
          start(next.run);
        }
        callback(...args);
      }) as typeof callback);
    if (running < max) return start(run);
    const entry = {
      run,
      timer: setTimeout(() => {
        const at = waiting.indexOf(entry);
        if (at >= 0) waiting.splice(at, 1);
        const error: NodeJS.ErrnoException = new Error(
          `looking up ${hostname} waited ${maxWaitMs} ms behind lookups that did not return`,
        );
        error.code = "ETIMEOUT";
        callback(error, "", 0);
      }, maxWaitMs),
    };
    entry.timer.unref();
    waiting.push(entry);
  };
}
