/**
 * A worker started in-process (`startWorker().stop()`, as a program that embeds the worker
 * calls it) and stopped while its Redis is away: the stop ends. Before, it waited for
 * BullMQ's `Worker.close()`, which never resolves while Redis is away
 * (taskforcesh/bullmq#4656), and for the running job, whose last writes wait for Redis: it
 * hung until Redis came back. `fleet worker` itself was bounded by its exit deadline. Now,
 * after the grace period, those waits are bounded (STOP_WAIT_MS, as the sweeper's) and the
 * connections are closed. With Redis there, the stop still lets running work finish or hand
 * it back (worker-shutdown.test.ts). And once stopped, nothing of it keeps the program alive:
 * before, BullMQ's lock renewal (its close, which would stop it, never ended) and a stuck
 * job's lease renewals went on, and the program lived on for a minute or more after its stop.
 */
import pino from "pino";
import { afterAll, describe, expect, it } from "vitest";
import type { FleetClient } from "../src/producer/client.js";
import { loadConfig } from "../src/shared/config.js";
import { type RunningWorker, startWorker } from "../src/worker/worker.js";
import { afterStop, type Embedding, killEmbeddings, startEmbedding } from "./support/embedding-program.js";
import { createFleetEnv, type FleetEnv, waitFor } from "./support/fleet-env.js";
import { startRedis, stopRedis } from "./support/private-redis.js";
import { type PrivateRedisFleet, startPrivateRedisFleet } from "./support/private-redis-fleet.js";
import { waitForToolCall } from "./support/tool-call-stored.js";

/** An agent whose run sleeps a minute in a tool: a job running when Redis goes. */
const SLEEPER = {
  model: {
    provider: "scripted" as const,
    steps: [{ toolCalls: [{ name: "sleep", arguments: { ms: 60_000 } }] }],
  },
  tools: ["sleep"],
};

/** A SLEEPER session whose sleep call is stored: a job running inside its tool. */
async function startSleeping(client: FleetClient): Promise<void> {
  const { id } = await client.createSession({ agent: SLEEPER });
  await client.send(id, "sleep a while");
  await waitForToolCall(client, id, "sleep");
}

describe("an embedded worker stopped while Redis is away", () => {
  let fleet: FleetEnv | undefined;
  let started: PrivateRedisFleet | undefined;
  let worker: RunningWorker | undefined;
  let stopped = false;
  /** The embedding programs started (test/fixtures/embedded-worker.ts). */
  const embedding: Embedding[] = [];
  let idle: FleetEnv | undefined;
  afterAll(async () => {
    await killEmbeddings(embedding);
    // The fleet's own close talks to Redis: it is started again for it.
    if (!started || !fleet) return;
    const back = await startRedis(started.port);
    await idle?.close();
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
    await startSleeping(client);
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

  /**
   * Starts the embedding program (test/fixtures/embedded-worker.ts) on `env` with Redis back
   * (empty), runs `meanwhile`, takes Redis away, stops the worker, and tells whether the
   * program then exited by itself or, 10 s after its stop, was still alive (and on what).
   */
  async function stopEmbedded(env: Record<string, string>, meanwhile: () => Promise<void>) {
    const redis = await startRedis(started!.port);
    try {
      const program = startEmbedding("test/fixtures/embedded-worker.ts", env);
      embedding.push(program);
      await waitFor(
        async () => program.out().includes("started"),
        30_000,
        `the embedding program to start: ${program.out()}`,
      );
      await meanwhile();
      await stopRedis(redis);
      await new Promise((r) => setTimeout(r, 1_000));
      return await afterStop(program);
    } finally {
      await stopRedis(redis);
    }
  }

  it("leaves nothing running once stopped, a job running: the program that embeds it exits by itself", async () => {
    if (!started || !fleet) throw new Error("the first case did not start the fleet");
    const { client } = started;
    const result = await stopEmbedded(fleet.env, async () => {
      // A job of its own running when Redis goes (its lease renewals kept the program alive).
      await startSleeping(client);
    });
    expect(result).toEqual({ ended: "exited", out: "started\nstopped\n" });
  }, 90_000);

  it("leaves nothing running once stopped, idle: the program that embeds it exits by itself", async () => {
    if (!started) throw new Error("the first case did not start the fleet");
    // A fleet of its own on the same Redis: no job of the cases above reaches this worker
    // (BullMQ's lock renewal kept such a program alive).
    idle = await createFleetEnv("workerawayidle", { redisUrl: `redis://127.0.0.1:${started.port}` });
    const result = await stopEmbedded(idle.env, async () => {});
    expect(result).toEqual({ ended: "exited", out: "started\nstopped\n" });
  }, 90_000);
});
