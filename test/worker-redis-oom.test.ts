/**
 * Redis refusing writes (maxmemory reached with `noeviction`) under a running worker: BullMQ
 * fails every fetch of a job with "OOM command not allowed" and reports each one. The worker
 * says so once (then once a minute with a count), not a hundred times a second, and takes
 * work again as soon as Redis takes writes.
 */
import type { ChildProcess } from "node:child_process";
import { Redis } from "ioredis";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import type { FleetClient } from "../src/producer/client.js";
import { createFleetEnv, type FleetEnv, waitFor } from "./support/fleet-env.js";
import { freePort, startRedis, stopRedis } from "./support/private-redis.js";

describe("a worker while Redis refuses writes", () => {
  let fleet: FleetEnv;
  let client: FleetClient;
  let redis: ChildProcess;
  let admin: Redis;

  beforeAll(async () => {
    const port = await freePort();
    redis = await startRedis(port, ["--maxmemory-policy", "noeviction"]);
    admin = new Redis(port, "127.0.0.1");
    fleet = await createFleetEnv("workeroom", { redisUrl: `redis://127.0.0.1:${port}` });
    ({ client } = await fleet.startApi());
  });
  afterAll(async () => {
    await admin?.config("SET", "maxmemory", "0").catch(() => {});
    await fleet?.close();
    admin?.disconnect();
    if (redis) await stopRedis(redis);
  });

  it("warns once, not on every fetch, and works again once writes pass", async () => {
    // Many sessions in flight, as on a busy worker: each fetch and each job's end fails.
    const worker = await fleet.spawnWorker({ WORKER_CONCURRENCY: "50" });
    await client.createBatch(
      Array.from({ length: 100 }, (_, i) => ({
        agent: { model: { provider: "scripted" as const, steps: [{ text: "slow", delayMs: 300 + 10 * i }] } },
        input: "hi",
      })),
    );
    // Once the worker holds runs: their ends and events are the writes Redis refuses. Refused
    // from before its first fetch, it had only its fetches, each retried after BullMQ's delay,
    // and the fresh-clone CI counted fewer than 50 in 20 s.
    await waitFor(
      async () => {
        const [row] = await fleet.database.sql<{ n: number }[]>`
          select count(*)::int as n from runs where status = 'running'`;
        return (row?.n ?? 0) >= 20;
      },
      20_000,
      "the worker to hold 20 runs",
    );
    await admin.call("CONFIG", "RESETSTAT");
    await admin.config("SET", "maxmemory", "1");
    // Until Redis has refused the worker many writes (its fetches and job ends), as counted by
    // Redis itself: a fixed wait could hold few of them on a loaded machine.
    await waitFor(async () => (await refusedWrites(admin)) >= 50, 20_000, "Redis to refuse 50 writes");
    // Its line reaches the pipe a moment after Redis counted the refusals (CI once read none yet).
    await waitFor(async () => oomLinesOf(worker.output()).length >= 1, 10_000, "the worker to say so");
    await admin.config("SET", "maxmemory", "0");
    const oomLines = oomLinesOf(worker.output());
    expect(oomLines.length).toBeLessThanOrEqual(2);
    expect(oomLines[0]).toMatch(/Redis refuses work/);

    const { id } = await client.createSession({
      agent: { model: { provider: "scripted", steps: [{ text: "ok" }] } },
    });
    const { runId } = await client.send(id, "hi");
    expect(await client.waitForRun(runId, { timeoutMs: 15_000 })).toMatchObject({ endedReason: "completed" });
  }, 40_000);
});

/** The worker's own lines about refused writes: each job that fails says so once per attempt, as it should. */
function oomLinesOf(output: string): string[] {
  return output
    .split("\n")
    .filter((line) => line.includes("OOM command not allowed") && /"msg":"(worker error|Redis)/.test(line));
}

/** Commands Redis refused with OOM since its statistics were reset (INFO errorstats). */
async function refusedWrites(admin: Redis): Promise<number> {
  const info = await admin.info("errorstats");
  return Number(/errorstat_OOM:count=(\d+)/.exec(info)?.[1] ?? 0);
}
