/**
 * How workers signal the sweeper, named in one place because both roles use the names:
 * - each worker names one Redis connection `<prefix>:live:<workerId>`; the kernel closes a
 *   killed process's socket at once, so the name vanishes from CLIENT LIST within
 *   milliseconds of a crash (the sweeper's liveness check reads it);
 * - workers publish runs that stopped short on `<prefix>:events`, so the sweeper wakes
 *   at once instead of at its next poll.
 */

/** The client name a worker gives its liveness connection. */
export function livenessName(prefix: string, workerId: string): string {
  return `${prefix}:live:${workerId}`;
}

/** The marker before a worker id in a liveness connection's name. */
export function livenessMarker(prefix: string): string {
  return `${prefix}:live:`;
}

/** The Redis channel on which workers report runs that stopped short. */
export function eventsChannel(prefix: string): string {
  return `${prefix}:events`;
}

/**
 * The Redis channel on which the API asks workers to abort sessions it cancelled
 * (contracts §9): a message is `{"sessionIds": [...]}`. Best effort: Postgres holds the
 * cancel, and a worker checks it before each tool starts.
 */
export function cancelChannel(prefix: string): string {
  return `${prefix}:cancel`;
}
