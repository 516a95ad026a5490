/** The API process (`fleet api`): the HTTP API plus the queue gauge, on its own connections. */
import type { FleetConfig } from "../shared/config.js";
import { openDatabase } from "../shared/db/client.js";
import { servicesReachable } from "../shared/http-server.js";
import { createMetrics } from "../shared/metrics.js";
import { QUEUES, RunQueues } from "../shared/queues.js";
import { closeRedis, createRedis } from "../shared/redis.js";
import { closeAll } from "../shared/shutdown.js";
import { SessionQueries } from "../shared/store/session-queries.js";
import { FleetToolNames, readToolNames } from "../shared/tool-names.js";
import { FleetService } from "./fleet-service.js";
import { buildApi } from "./http-api.js";

export type RunningApi = { port: number; url: string; stop: () => Promise<void> };

const QUEUE_STATES = ["waiting", "active", "delayed", "completed", "failed", "prioritized"] as const;

export async function startApi(config: FleetConfig, options: { port?: number } = {}): Promise<RunningApi> {
  const database = openDatabase(config.databaseUrl);
  const redis = createRedis(config.redisUrl, "producer");
  const queues = new RunQueues(redis, config.prefix);
  // The API is the one process that exports queue depths.
  const metrics = createMetrics("api", {
    queueDepths: async () =>
      (
        await Promise.all(
          (["runs", "resumes"] as const).map(async (key) => {
            const counts = await queues[key].getJobCounts(...QUEUE_STATES);
            return QUEUE_STATES.map((state) => ({
              queue: QUEUES[key].name,
              state,
              count: counts[state] ?? 0,
            }));
          }),
        )
      ).flat(),
  });
  const service = new FleetService({
    queries: new SessionQueries(database),
    queues,
    metrics,
    toolNames: new FleetToolNames(() => readToolNames(redis, config.prefix)),
    models: config.models,
  });
  const app = buildApi({
    service,
    registry: metrics.registry,
    logLevel: config.logLevel,
    healthy: servicesReachable(database, redis),
  });
  await app.listen({ port: options.port ?? config.port, host: "0.0.0.0" });
  const address = app.server.address();
  const port = typeof address === "object" && address ? address.port : config.port;
  return {
    port,
    url: `http://127.0.0.1:${port}`,
    stop: () =>
      closeAll(
        [() => app.close(), () => queues.close(), () => closeRedis(redis), () => database.close()],
        app.log,
      ),
  };
}
