/**
 * A sweeper stopped while its Redis is away (`startSweeper().stop()`, as an embedding process
 * or a test's teardown calls it): the stop ends. Before, it waited for the webhook Worker's
 * `close()`, which BullMQ never resolves while Redis is away (taskforcesh/bullmq#4656), so it
 * hung until Redis came back (infra-faults' teardown once ran past vitest's 30 s limit, its
 * worker children left running). Now that wait is bounded (STOP_WAIT_MS) and the rest of
 * the stop goes on. `fleet sweeper` itself was already bounded by its exit deadline. And once
 * stopped, nothing of it keeps the program alive: before, the webhook Worker's lock renewal
 * (which only its close, never ending, would stop) kept an embedding program alive a minute
 * or more after the stop.
 */
import { spawn } from "node:child_process";
import { resolve } from "node:path";
import { afterAll, describe, expect, it } from "vitest";
import { exitedWithOutput } from "./support/child-exit.js";
import { createFleetEnv, type FleetEnv, ROOT, waitFor } from "./support/fleet-env.js";
import { startRedis, stopRedis } from "./support/private-redis.js";
import { startPrivateRedisFleet } from "./support/private-redis-fleet.js";

describe("a sweeper stopped while Redis is away", () => {
  let fleet: FleetEnv | undefined;
  let port = 0;
  afterAll(async () => {
    // The fleet's own close talks to Redis: it is started again for it.
    if (!fleet) return;
    const back = await startRedis(port);
    await fleet.close();
    await stopRedis(back);
  });

  it("ends its stop without waiting for Redis to come back", async () => {
    const started = await startPrivateRedisFleet("sweepaway");
    ({ fleet, port } = started);
    await new Promise((resolve) => setTimeout(resolve, 1_000));
    await stopRedis(started.redis);
    await new Promise((resolve) => setTimeout(resolve, 1_000));
    let timer: NodeJS.Timeout | undefined;
    const outcome = await Promise.race([
      started.sweeper.stop().then(() => "stopped" as const),
      new Promise<"still waiting">((resolve) => {
        timer = setTimeout(() => resolve("still waiting"), 25_000);
      }),
    ]);
    clearTimeout(timer);
    await started.api.stop();
    expect(outcome).toBe("stopped");
  }, 60_000);

  it("leaves nothing running once stopped: the program that embeds it exits by itself", async () => {
    if (!port) throw new Error("the first case did not start the fleet");
    const redis = await startRedis(port);
    const own = await createFleetEnv("sweepawayembed", { redisUrl: `redis://127.0.0.1:${port}` });
    const child = spawn(
      process.execPath,
      ["--import", "tsx", resolve(ROOT, "test/fixtures/embedded-sweeper.ts")],
      {
        cwd: ROOT,
        env: { ...process.env, ...own.env },
        stdio: ["pipe", "pipe", "pipe"],
      },
    );
    let out = "";
    child.stdout.on("data", (chunk) => {
      out += chunk;
    });
    child.stderr.on("data", (chunk) => {
      out += chunk;
    });
    const exited = exitedWithOutput(child);
    try {
      await waitFor(async () => out.includes("started"), 30_000, `the embedding program to start: ${out}`);
      await stopRedis(redis);
      await new Promise((r) => setTimeout(r, 1_000));
      child.stdin.end("stop\n");
      // Exited by itself, or (its stop done) still alive 10 s later, saying on what.
      const ended = await new Promise<"exited" | "alive">((done) => {
        const check = setInterval(() => {
          if (/stopped\n\[/.test(out)) {
            clearInterval(check);
            done("alive");
          }
        }, 100);
        void exited.then(() => {
          clearInterval(check);
          done("exited");
        });
      });
      expect({ ended, out }).toEqual({ ended: "exited", out: "started\nstopped\n" });
    } finally {
      child.kill("SIGKILL");
      const back = await startRedis(port);
      await own.close();
      await stopRedis(back);
    }
  }, 90_000);
});
