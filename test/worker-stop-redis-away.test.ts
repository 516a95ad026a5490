/**
 * A worker started in-process (`startWorker().stop()`, as a program that embeds the worker
 * calls it) and stopped while its Redis is away: the stop ends. Before, it waited for
 * BullMQ's `Worker.close()`, which never resolves while Redis is away
 * (taskforcesh/bullmq#4656), and for the running job, whose last writes wait for Redis: it
 * hung until Redis came back. `fleet worker` itself was bounded by its exit deadline. Now,
 * after the grace period, those waits are bounded (STOP_WAIT_MS, as the sweeper's) and the
 * connections are closed. With Redis there, the stop still lets running work finish or hand
 * it back (worker-shutdown.test.ts).
 */
import pino from "pino";
import { afterAll, describe, expect, it } from "vitest";
import { loadConfig } from "../src/shared/config.js";
import { type RunningWorker, startWorker } from "../src/worker/worker.js";
import { type FleetEnv, waitFor } from "./support/fleet-env.js";
import { startRedis, stopRedis } from "./support/private-redis.js";
import { type PrivateRedisFleet, startPrivateRedisFleet } from "./support/private-redis-fleet.js";

describe("an embedded worker stopped while Redis is away", () => {
  let fleet: FleetEnv | undefined;
  let started: PrivateRedisFleet | undefined;
  let worker: RunningWorker | undefined;
  let stopped = false;
  afterAll(async () => {
    // The fleet's own close talks to Redis: it is started again for it.
    if (!started || !fleet) return;
    const back = await startRedis(started.port);
    if (!stopped) await worker?.stop();
    await started.sweeper.stop();
    await started.api.stop();
    await fleet.close();
    await stopRedis(back);
  }, 90_000);

  it("ends its stop, a job running, without waiting for Redis to come back", async () => {
    started = await startPrivateRedisFleet("workeraway");
    fleet = started.fleet;
    const warnings: string[] = [];
    const logger = pino(
      { level: "warn" },
      { write: (line: string) => void warnings.push(JSON.parse(line).msg) },
    );
    worker = await startWorker(
      { ...loadConfig(fleet.env), shutdownGraceMs: 500, logLevel: "silent" },
      { logger, serveMetrics: false },
    );
    const { client } = started;
    const { id } = await client.createSession({
      agent: {
        model: {
          provider: "scripted",
          steps: [{ toolCalls: [{ name: "sleep", arguments: { ms: 60_000 } }] }],
        },
        tools: ["sleep"],
      },
    });
    await client.send(id, "sleep a while");
    await waitFor(
      async () =>
        (await client.getSession(id)).messages.some(
          (m) => m.role === "assistant" && (m.toolCalls ?? []).some((c) => c.name === "sleep"),
        ),
      15_000,
      "the sleep call to be stored",
    );
    await stopRedis(started.redis);
    await new Promise((resolve) => setTimeout(resolve, 1_000));
    let timer: NodeJS.Timeout | undefined;
    const outcome = await Promise.race([
      worker.stop().then(() => "stopped" as const),
      new Promise<"still waiting">((resolve) => {
        timer = setTimeout(() => resolve("still waiting"), 40_000);
      }),
    ]);
    clearTimeout(timer);
    stopped = outcome === "stopped";
    expect(outcome).toBe("stopped");
    expect(warnings).toContain("a running job did not end (Redis away?); stopping without it");
  }, 90_000);
});
