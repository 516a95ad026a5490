/**
 * What the roles build alike as they start: their EventWriter from the FLEET_EVENTS settings
 * (the API, the worker and the sweeper), and the eviction-policy watch with the metrics port
 * that the worker and the sweeper take before they say they are ready.
 */
import type { Redis } from "ioredis";
import type { Logger } from "pino";
import type { FleetConfig } from "./config.js";
import type { Database } from "./db/client.js";
import { type EventsCounter, EventWriter } from "./event-writer.js";
import { checkEvictionPolicy } from "./eviction-policy.js";
import { servicesReachable, startMetricsOrClose } from "./http-server.js";
import type { FleetMetrics } from "./metrics.js";
import { closeRedis } from "./redis.js";
import { closeAll } from "./shutdown.js";

/**
 * A role's EventWriter: the retention and on/off of `config.events`; `gatherMs` and `store`
 * as EventWriter takes them.
 */
export function roleEventWriter(
  redis: Redis,
  config: Pick<FleetConfig, "prefix" | "events">,
  counter: EventsCounter,
  gatherMs: number,
  store: ConstructorParameters<typeof EventWriter>[6],
): EventWriter {
  const { maxEvents, maxAgeMs, maxBytes, enabled } = config.events;
  return new EventWriter(
    redis,
    config.prefix,
    { maxEvents, maxAgeMs, maxBytes },
    counter,
    enabled,
    gatherMs,
    store,
  );
}

/**
 * The start of a worker or a sweeper, before it says it is ready: one warning when Redis may
 * evict the leases and jobs (and the watch that says when that changes), then the metrics
 * port. A role that cannot have the port stops the watch and closes what it opened so far —
 * its queues, its Redis connections (`redis` and `others`), its database — and throws, so
 * nothing left open keeps the process alive. `serve: false`: no server (`server` is null).
 */
export async function watchEvictionAndServeMetrics(role: {
  serve: boolean;
  config: Pick<FleetConfig, "metricsPort" | "evictionCheckMs">;
  log: Logger;
  metrics: Pick<FleetMetrics, "registry" | "redisEvictionPolicySafe">;
  database: Database;
  redis: Redis;
  others: Redis[];
  queues: { close(): Promise<unknown> };
}): Promise<{
  stopEvictionWatch: () => void;
  server: Awaited<ReturnType<typeof startMetricsOrClose>>;
}> {
  const { config, log, metrics, database, redis, queues } = role;
  const stopEvictionWatch = await checkEvictionPolicy(
    redis,
    log,
    metrics.redisEvictionPolicySafe,
    config.evictionCheckMs,
  );
  const server = await startMetricsOrClose(
    role.serve,
    metrics.registry,
    config.metricsPort,
    servicesReachable(database, redis),
    () =>
      closeAll(
        [
          async () => stopEvictionWatch(),
          () => queues.close(),
          ...[redis, ...role.others].map((c) => () => closeRedis(c)),
          () => database.close(),
        ],
        log,
      ),
  );
  return { stopEvictionWatch, server };
}
