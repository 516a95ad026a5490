/**
 * Whether Redis lost its data while this sweeper's connection stayed up: a FLUSHALL or
 * FLUSHDB, or a server restarted (or failed over) empty behind a proxy that kept the client's
 * connection, as managed Redis services do. Every session lease is gone then, and a missing
 * lease looks like one that expired; but the workers are alive and take their leases back at
 * their next renewal (lease-keeper.ts), within a third of the TTL. The sweeper learns of such
 * a loss from a marker key of the fleet's that nothing deletes: the value it last read
 * changed (another sweeper wrote a new one) or is gone. Its caller then treats the loss as
 * Redis trouble (sweeper.ts `redisTrouble`): no missing lease is judged for a TTL. A loss
 * before a sweeper's first look is not seen here (nothing to compare; a marker that Postgres
 * kept would not tell either once another sweeper wrote a new one): its start counts as
 * Redis trouble instead (sweeper.ts), which covers such a loss whenever it happened.
 * Each loss seen is logged once and counted (`fleet_redis_data_losses_total`): every sweeper
 * that looked before sees the same loss, so the fleet's count is the max over sweepers.
 */
import { randomUUID } from "node:crypto";
import type { Redis } from "ioredis";
import type { Logger } from "pino";
import type { FleetMetrics } from "../shared/metrics.js";

/** Pure: the marker read now against the one read before (undefined: never read). */
export function markerLost(before: string | undefined, now: string | null): boolean {
  return before !== undefined && now !== before;
}

export class RedisDataLoss {
  /** The marker's value at this sweeper's last look; undefined before its first. */
  private seen: string | undefined;

  constructor(
    private readonly deps: {
      redis: Redis;
      prefix: string;
      metrics: Pick<FleetMetrics, "redisDataLosses">;
      log: Pick<Logger, "warn">;
    },
    /** Called at each loss seen, after it is logged and counted. */
    private readonly onLoss: () => void,
  ) {}

  key(): string {
    return `${this.deps.prefix}:data-marker`;
  }

  /**
   * Reads the marker (writes one when there is none) and says whether Redis lost its data
   * since the last look. The first look says no: a new fleet, or a sweeper that starts, has
   * seen nothing to lose. A loss is logged, counted and told to `onLoss`.
   */
  async check(): Promise<boolean> {
    let now = await this.deps.redis.get(this.key());
    if (now === null) {
      await this.deps.redis.set(this.key(), randomUUID(), "NX");
      now = await this.deps.redis.get(this.key());
    }
    const lost = markerLost(this.seen, now);
    this.seen = now ?? undefined;
    if (lost) {
      this.deps.log.warn("Redis lost its data: missing leases and heartbeats judged after a lease TTL");
      this.deps.metrics.redisDataLosses.inc();
      this.onLoss();
    }
    return lost;
  }
}
