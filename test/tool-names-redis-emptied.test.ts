/**
 * The fleet's tool names (contracts §12: an agent listing a tool no worker registered is
 * refused at creation) live in a Redis set the workers fill when they start. Redis restarted
 * empty took the set with it, and the workers, still running, never wrote it again: an API
 * process started afterwards (a restart, one more behind the load balancer) refused every
 * agent listing a tool of theirs, 400 `agent.tools[0]`, until each worker was restarted. Now a
 * worker writes its names again when its connection comes back, and every lease TTL
 * (a Redis emptied under a connection that stayed up).
 */
import type { ChildProcess } from "node:child_process";
import { mkdtemp, rm, writeFile } from "node:fs/promises";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { Redis } from "ioredis";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { toolNamesKey } from "../src/shared/tool-names.js";
import type { RunningSweeper } from "../src/sweeper/sweeper-process.js";
import { type FleetEnv, waitFor } from "./support/fleet-env.js";
import { startRedis, stopRedis } from "./support/private-redis.js";
import { startPrivateRedisFleet } from "./support/private-redis-fleet.js";

const AGENT = { model: { provider: "scripted" as const, steps: [{ text: "hi" }] }, tools: ["probe"] };

describe("a worker's own tool names after Redis lost its data", () => {
  let fleet: FleetEnv;
  let sweeper: RunningSweeper;
  let redis: ChildProcess;
  let port: number;
  let dir: string;

  beforeAll(async () => {
    ({ port, redis, fleet, sweeper } = await startPrivateRedisFleet("toolnamesemptied"));
    dir = await mkdtemp(join(tmpdir(), "fleet-probe-tool-"));
  });
  afterAll(async () => {
    await sweeper?.stop();
    await fleet?.close();
    if (redis) await stopRedis(redis);
    if (dir) await rm(dir, { recursive: true, force: true });
  });

  /** Whether an API process started now accepts an agent listing `probe`. */
  const newApiAccepts = async (): Promise<boolean> => {
    const { client } = await fleet.startApi();
    return client.createSession({ agent: AGENT }).then(
      () => true,
      () => false,
    );
  };
  /** The fleet's set of tool names, which an API reads to accept an agent (tool-names.ts). */
  const registered = async (): Promise<boolean> =>
    (await fleet.redis.sismember(toolNamesKey(fleet.config.prefix), "probe").catch(() => 0)) === 1;

  it("are written again: an API started afterwards accepts an agent listing them", async () => {
    const file = join(dir, "probe.mjs");
    await writeFile(
      file,
      'export default [{ name: "probe", description: "d", parameters: { type: "object" }, async run() { return "ok"; } }];\n',
    );
    await fleet.spawnWorker({}, ["--tools", file]);
    expect(await newApiAccepts()).toBe(true);

    // Restarted empty: the worker reconnects.
    await stopRedis(redis);
    redis = await startRedis(port);
    await waitFor(registered, 20_000, "the worker's tool names written again after the restart");
    expect(await newApiAccepts()).toBe(true);

    // Emptied under connections that stay up.
    const admin = new Redis({ port });
    try {
      expect(await admin.flushall()).toBe("OK");
    } finally {
      admin.disconnect();
    }
    expect(await registered()).toBe(false);
    await waitFor(registered, 20_000, "the worker's tool names written again after the FLUSHALL");
    expect(await newApiAccepts()).toBe(true);
  }, 90_000);
});
