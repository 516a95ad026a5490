/**
 * What Prometheus and a load balancer see while Redis is away: a worker's /healthz answers
 * 503 at once (its connection queues commands until Redis is back, so a PING never came back
 * and the probe hung); the API's /metrics still answers, without the queue depths it reads
 * from Redis (one gauge that could not be read failed the whole scrape, and the API looked
 * down); both come back with Redis.
 */
import type { ChildProcess } from "node:child_process";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { servicesReachable } from "../src/shared/http-server.js";
import { createFleetEnv, type FleetEnv, waitFor } from "./support/fleet-env.js";
import { freePort, startRedis, stopRedis } from "./support/private-redis.js";

/** GET `url`: its status, or "no answer" within `ms`. */
async function probe(url: string, ms = 5_000): Promise<{ status: number | "no answer"; text: string }> {
  try {
    const response = await fetch(url, { signal: AbortSignal.timeout(ms) });
    return { status: response.status, text: await response.text() };
  } catch {
    return { status: "no answer", text: "" };
  }
}

describe("probes while Redis is away", () => {
  let fleet: FleetEnv;
  let redis: ChildProcess;
  let redisPort: number;
  let apiUrl: string;
  let workerMetrics: string;

  beforeAll(async () => {
    redisPort = await freePort();
    redis = await startRedis(redisPort);
    fleet = await createFleetEnv("redisprobes", { redisUrl: `redis://127.0.0.1:${redisPort}` });
    apiUrl = (await fleet.startApi()).api.url;
    const port = await freePort();
    await fleet.spawnWorker({ METRICS_PORT: String(port) });
    workerMetrics = `http://127.0.0.1:${port}`;
  }, 60_000);
  afterAll(async () => {
    if (redis && (redis.exitCode !== null || redis.signalCode !== null)) redis = await startRedis(redisPort);
    await fleet?.close();
    if (redis) await stopRedis(redis);
  });

  it("the worker's /healthz says 503 at once and the API's /metrics still answers; both recover", async () => {
    expect((await probe(`${workerMetrics}/healthz`)).status).toBe(200);
    const before = await probe(`${apiUrl}/metrics`);
    expect(before.status).toBe(200);
    expect(before.text).toMatch(/^fleet_queue_jobs\{/m);

    await stopRedis(redis);
    await waitFor(
      async () => (await probe(`${workerMetrics}/healthz`)).status === 503,
      10_000,
      "the worker's /healthz to say 503",
    );
    const worker = await probe(`${workerMetrics}/metrics`);
    expect(worker.status).toBe(200);
    const api = await probe(`${apiUrl}/metrics`);
    expect(api.status).toBe(200);
    expect(api.text).toMatch(/^fleet_sse_clients\S* 0$/m);
    expect(api.text).not.toMatch(/^fleet_queue_jobs\{/m);
    expect((await probe(`${apiUrl}/healthz`)).status).toBe(503);

    redis = await startRedis(redisPort);
    await waitFor(
      async () => (await probe(`${workerMetrics}/healthz`)).status === 200,
      30_000,
      "the worker's /healthz to say 200",
    );
    await waitFor(
      async () => /^fleet_queue_jobs\{/m.test((await probe(`${apiUrl}/metrics`)).text),
      30_000,
      "the queue depths back in the API's /metrics",
    );
  }, 90_000);

  it("servicesReachable says no within its timeout when Redis is ready but does not answer", async () => {
    const stuck = { status: "ready" as const, ping: () => new Promise<"PONG">(() => {}) };
    const check = servicesReachable(fleet.database, stuck as never, 200);
    // (Its PING never answers: only the timeout can say no.)
    expect(await check()).toBe(false);
    const away = servicesReachable(
      fleet.database,
      { status: "reconnecting", ping: stuck.ping } as never,
      200,
    );
    expect(await away()).toBe(false);
  });
});
