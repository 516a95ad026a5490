/**
 * Redis being away, as a process sees it: which errors say the link is down
 * (`isConnectionError`), and one warning for an outage rather than one per failed reconnect
 * (`RedisOutageLog`). The connections themselves: redis.ts.
 */
import type { Redis } from "ioredis";
import type { Logger } from "pino";

const CONNECTION_CODES = new Set([
  "ECONNREFUSED",
  "ECONNRESET",
  "ECONNABORTED",
  "ETIMEDOUT",
  "EHOSTUNREACH",
  "ENETUNREACH",
  "ENOTFOUND",
  "EAI_AGAIN",
  "EPIPE",
]);

/**
 * Whether an error says the link to Redis is down (refused, reset, timed out, closed), as
 * opposed to an error of the command itself. While Redis is away every reconnect attempt of
 * every connection — BullMQ's own included — raises one; RedisOutageLog reports them once.
 */
export function isConnectionError(error: unknown): boolean {
  const code = (error as NodeJS.ErrnoException | undefined)?.code;
  if (code && CONNECTION_CODES.has(code)) return true;
  const message = error instanceof Error ? error.message : String(error);
  return /Connection is closed|Stream isn't writeable|connect ETIMEDOUT|getaddrinfo|CLUSTERDOWN|Too many Cluster redirections|Failed to refresh slots cache|None of startup nodes is available|no master known yet/i.test(
    message,
  );
}

/**
 * One warning when a process loses Redis and one when it has it back, however many
 * connections and reconnect attempts the outage spans (instead of a stack trace per attempt).
 * The outage ends when every watched connection is ready again.
 */
export class RedisOutageLog {
  private readonly down = new Set<Redis>();
  private since = 0;

  constructor(private readonly log: Pick<Logger, "warn">) {}

  watch(...connections: Redis[]): this {
    for (const connection of connections) {
      connection.on("error", (error: Error) => {
        if (isConnectionError(error)) this.lost(connection, error);
      });
      connection.on("ready", () => this.back(connection));
    }
    return this;
  }

  private lost(connection: Redis, error: Error): void {
    if (this.down.has(connection)) return;
    this.down.add(connection);
    if (this.down.size > 1) return;
    this.since = Date.now();
    this.log.warn(
      { redisError: error.message },
      `Redis is unreachable (${error.message}); waiting for it to come back`,
    );
  }

  private back(connection: Redis): void {
    if (!this.down.delete(connection) || this.down.size > 0) return;
    const seconds = ((Date.now() - this.since) / 1000).toFixed(1);
    this.log.warn({ outageSeconds: Number(seconds) }, `Redis is reachable again after ${seconds} s`);
  }
}
