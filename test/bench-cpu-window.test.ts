/**
 * `npm run bench` charges Redis's CPU to the server the bench uses, not to every redis-server
 * on the machine: on a machine shared with other Redis servers (a test's private ones, other
 * users' instances) their CPU used to land in the fleet's and the baseline's "CPU redis".
 */
import type { ChildProcess } from "node:child_process";
import { Redis } from "ioredis";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { pidsByName, redisServerPids } from "../bench/support.js";
import { freePort, startRedis, stopRedis } from "./support/private-redis.js";

describe("the bench's Redis CPU", () => {
  let first: ChildProcess;
  let second: ChildProcess;
  let redis: Redis;

  beforeAll(async () => {
    // Two servers of this test's own: whatever else runs on the machine, there are two.
    first = await startRedis(await freePort());
    second = await startRedis(await freePort());
    const port = Number(first.spawnargs[first.spawnargs.indexOf("--port") + 1]);
    redis = new Redis({ port, host: "127.0.0.1", maxRetriesPerRequest: 1 });
  });

  afterAll(async () => {
    await redis?.quit();
    await Promise.all([first, second].filter(Boolean).map(stopRedis));
  });

  it("is the CPU of the server the bench is connected to, and of no other redis-server", async () => {
    expect(pidsByName("redis-server")).toEqual(expect.arrayContaining([first.pid, second.pid]));
    expect(await redisServerPids(redis)).toEqual([first.pid]);
  });
});
