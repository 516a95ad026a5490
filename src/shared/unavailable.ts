/**
 * Whether an error says a service the fleet stands on — Postgres or Redis — is away or
 * refusing work, rather than that this request or the code is wrong. The API answers those
 * `503` with `Retry-After` (try again shortly), not `500 internal error`, which reads as a bug.
 */
import type { Logger } from "pino";
import { isConnectionError } from "./redis-outage.js";

/** postgres.js's own codes for a connection that failed or went away. */
const POSTGRES_LINK = new Set([
  "CONNECTION_CLOSED",
  "CONNECTION_ENDED",
  "CONNECTION_DESTROYED",
  "CONNECT_TIMEOUT",
]);
/**
 * SQLSTATEs of a server that cannot take work now: 08 connection exceptions, 53300 too many
 * connections, 57P01–57P03 shutting down / cannot connect now, 25006 read-only (a replica),
 * 57014 a statement cancelled (the DBA's `statement_timeout`, an operator's
 * `pg_cancel_backend`), 55P03 a lock not had in time (`lock_timeout`, a lock held elsewhere).
 */
const POSTGRES_STATE = /^(08...|53300|57P0[123]|25006|57014|55P03)$/;
/** Redis replies of a server that cannot take this write now: OOM under noeviction, loading, a replica. */
const REDIS_REPLY = /^(OOM|LOADING|READONLY|MASTERDOWN|BUSY|TRYAGAIN|CLUSTERDOWN) /;

export function isServiceUnavailable(error: unknown): boolean {
  if (!(error instanceof Error)) return false;
  const code = (error as { code?: unknown }).code;
  if (typeof code === "string" && (POSTGRES_LINK.has(code) || POSTGRES_STATE.test(code))) return true;
  // ioredis: a command given up on while it reconnects.
  if (error.name === "MaxRetriesPerRequestError") return true;
  return REDIS_REPLY.test(error.message) || isConnectionError(error);
}

/**
 * Reports errors of a Redis that refuses work (out of memory under noeviction, loading, a
 * replica) once a minute with how many there were, instead of once each: BullMQ's workers
 * retry their fetch at once and report every failure, 100 a second per worker. `report`
 * returns false for any other error, which the caller logs as before.
 */
export class RefusalLog {
  private readonly seen = new Map<string, { at: number; count: number }>();

  constructor(
    private readonly log: Pick<Logger, "warn">,
    private readonly everyMs = 60_000,
    private readonly now: () => number = Date.now,
  ) {}

  report(error: unknown): boolean {
    if (!(error instanceof Error) || !REDIS_REPLY.test(error.message)) return false;
    const kind = error.message.split(" ", 1)[0]!;
    const seen = this.seen.get(kind);
    const now = this.now();
    if (seen && now - seen.at < this.everyMs) {
      seen.count++;
      return true;
    }
    this.seen.set(kind, { at: now, count: 0 });
    this.log.warn(
      { err: error, ...(seen ? { since: seen.count + 1 } : {}) },
      seen
        ? `Redis still refuses work (${error.message}): ${seen.count + 1} times since the last warning`
        : `Redis refuses work (${error.message}); told once a minute while it lasts`,
    );
    return true;
  }
}
