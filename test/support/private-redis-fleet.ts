/**
 * The set-up of tests that take Redis away: a private Redis server (on a free port, so
 * stopping and restarting it disturbs no other test), a fleet env on it with its API started,
 * and a sweeper in this process.
 */
import type { ChildProcess } from "node:child_process";
import type { RunningApi } from "../../src/producer/api-server.js";
import type { FleetClient } from "../../src/producer/client.js";
import { loadConfig } from "../../src/shared/config.js";
import { type RunningSweeper, startSweeper } from "../../src/sweeper/sweeper-process.js";
import { createFleetEnv, type FleetEnv } from "./fleet-env.js";
import { freePort, startRedis, stopRedis } from "./private-redis.js";

export type PrivateRedisFleet = {
  port: number;
  redis: ChildProcess;
  fleet: FleetEnv;
  api: RunningApi;
  client: FleetClient;
  sweeper: RunningSweeper;
};

/**
 * Started in that order (Redis, with `redisArgs` added; fleet env `name`, API, sweeper); what
 * started is stopped if a later step fails.
 */
export async function startPrivateRedisFleet(
  name: string,
  redisArgs: string[] = [],
): Promise<PrivateRedisFleet> {
  const port = await freePort();
  const redis = await startRedis(port, redisArgs);
  let fleet: FleetEnv | undefined;
  try {
    fleet = await createFleetEnv(name, { redisUrl: `redis://127.0.0.1:${port}` });
    const { api, client } = await fleet.startApi();
    const sweeper = await startSweeper(
      { ...loadConfig(fleet.env), logLevel: "silent" },
      { serveMetrics: false },
    );
    return { port, redis, fleet, api, client, sweeper };
  } catch (error) {
    await fleet?.close();
    await stopRedis(redis);
    throw error;
  }
}
