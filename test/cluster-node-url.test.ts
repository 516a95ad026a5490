/**
 * A plain `redis://` URL naming one node of a Redis Cluster (say a managed cluster's
 * configuration endpoint without `+cluster`) used to pass the start check — the node answers
 * PING — and the fleet then met `MOVED` for every key of a slot another node serves. The
 * check now refuses it naming REDIS_URL and the `redis+cluster://` URL to use instead.
 */
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { ValidationError } from "../src/shared/errors.js";
import { checkRedis, isClusterNodeInfo } from "../src/shared/preflight.js";
import { type RedisHandle, startRedisCluster } from "./support/redis-cluster.js";

describe("a cluster node named as one server", () => {
  let cluster: RedisHandle;
  beforeAll(async () => {
    cluster = await startRedisCluster(3);
  });
  afterAll(async () => {
    await cluster?.stop();
  });

  it("is refused at start naming REDIS_URL and the cluster URL to use", async () => {
    const url = `redis://127.0.0.1:${cluster.ports[0]}`;
    const error = await checkRedis(url, 3_000).then(
      () => null,
      (e: unknown) => e,
    );
    expect(error).toBeInstanceOf(ValidationError);
    expect((error as Error).message).toContain("REDIS_URL");
    expect((error as Error).message).toContain(`redis+cluster://127.0.0.1:${cluster.ports[0]}`);
  });

  it("the same cluster named as a cluster passes, and a single Redis passes", async () => {
    await checkRedis(cluster.url, 3_000);
    await checkRedis(process.env.REDIS_URL ?? "redis://127.0.0.1:6379", 3_000);
  });

  it("reads cluster_enabled from INFO cluster", () => {
    expect(isClusterNodeInfo("# Cluster\r\ncluster_enabled:1\r\n")).toBe(true);
    expect(isClusterNodeInfo("# Cluster\r\ncluster_enabled:0\r\n")).toBe(false);
    expect(isClusterNodeInfo("")).toBe(false);
  });
});
