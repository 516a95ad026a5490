/**
 * How the benchmarks give the fleet its sessions: the agent of benchmark session `index`
 * (the tool work of benchToolCall, then an answer), and the FleetService in the bench's own
 * process, as a backend that embeds the producer runs it.
 */
import type { Redis } from "ioredis";
import { FleetService } from "../src/producer/fleet-service.js";
import type { AgentConfigInput } from "../src/shared/agent-config.js";
import type { FleetConfig } from "../src/shared/config.js";
import { openDatabase } from "../src/shared/db/client.js";
import { createMetrics } from "../src/shared/metrics.js";
import { RunQueues } from "../src/shared/queues.js";
import { closeRedis, createRedis } from "../src/shared/redis.js";
import { SessionQueries } from "../src/shared/store/session-queries.js";
import { FleetToolNames, readToolNames } from "../src/shared/tool-names.js";
import { benchToolCall, type Cleanup } from "./support.js";

/** The fleet session with this index: one tool call, then `answer`; no model latency. */
export function benchAgent(index: number, answer: string): AgentConfigInput {
  const call = benchToolCall(index);
  const args =
    call.name === "write_file"
      ? { path: call.path, content: call.text }
      : { path: call.path, line: call.text };
  return {
    model: {
      provider: "scripted",
      steps: [{ toolCalls: [{ name: call.name, arguments: args }] }, { text: answer }],
    },
    tools: [call.name],
  };
}

/**
 * A FleetService in this process, on a database pool and a Redis connection of its own
 * (`redis`, also for reading its queues), all closed by `cleanup`.
 */
export function inProcessService(
  config: FleetConfig,
  cleanup: Cleanup,
): { service: FleetService; redis: Redis } {
  const database = openDatabase(config.databaseUrl);
  const redis = createRedis(config.redisUrl, "producer");
  const queues = new RunQueues(redis, config.prefix);
  cleanup.add("close the in-process FleetService", async () => {
    await queues.close();
    await closeRedis(redis);
    await database.close();
  });
  const service = new FleetService({
    queries: new SessionQueries(database),
    queues,
    metrics: createMetrics("bench"),
    toolNames: new FleetToolNames(() => readToolNames(redis, config.prefix)),
    models: config.models,
  });
  return { service, redis };
}
