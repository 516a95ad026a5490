/**
 * events-redis-loss.test.ts on a Redis Cluster: the one master holding the fleet's keys (its
 * prefix is hash-tagged) loses its data and its connections, the others stay up. The cluster
 * connection as a whole never goes away, so it never says `ready` again; its connection to
 * that node is dropped and made anew. A reader open across the loss must end (its reconnect
 * gets 410), not read the stream the next writer rebuilds — every message a second time.
 */
import { Redis } from "ioredis";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import type { FleetClient } from "../src/producer/client.js";
import { createFleetEnv, type FleetEnv } from "./support/fleet-env.js";
import { type RedisHandle, startRedisCluster } from "./support/redis-cluster.js";
import { readSse } from "./support/sse.js";

describe("event streams when one cluster node loses its data", () => {
  let cluster: RedisHandle;
  let fleet: FleetEnv;
  let client: FleetClient;
  let base: string;

  beforeAll(async () => {
    cluster = await startRedisCluster();
    fleet = await createFleetEnv("eventsclusterloss", { redisUrl: cluster.url });
    const started = await fleet.startApi();
    client = started.client;
    base = started.api.url;
    await fleet.spawnWorker();
  }, 90_000);
  afterAll(async () => {
    await fleet?.close();
    await cluster?.stop();
  });

  it("ends a stream open across the loss instead of serving the rebuilt history after its old position", async () => {
    const { id } = await client.createSession({
      agent: { model: { provider: "scripted", steps: [{ text: "first" }, { text: "second" }] } },
    });
    const url = `${base}/v1/sessions/${id}/events`;
    await client.waitForRun((await client.send(id, "one")).runId, { timeoutMs: 15_000 });
    const { events } = await readSse(url, { stop: (event) => event.type === "RUN_COMPLETED" });
    let second = "";
    const open = readSse(url, {
      after: events.at(-1)!.id,
      stop: (event) => event.type === "RUN_COMPLETED" && event.data.runId === second,
      timeoutMs: 40_000,
    });
    await new Promise((r) => setTimeout(r, 200));
    // The node holding the fleet's keys (the only one with any) loses them and its clients.
    for (const port of cluster.ports) {
      const node = new Redis(port, "127.0.0.1");
      if ((await node.dbsize()) > 0) {
        await node.flushall();
        await node.call("CLIENT", "KILL", "TYPE", "normal");
        await node.call("CLIENT", "KILL", "TYPE", "pubsub");
      }
      node.disconnect();
    }
    await new Promise((r) => setTimeout(r, 1_500));
    second = (await client.send(id, "two")).runId;
    await client.waitForRun(second, { timeoutMs: 30_000 });
    const seqs = (await open).events.flatMap((e) =>
      e.type === "MESSAGE" ? [(e.data.message as { seq: number }).seq] : [],
    );
    // Whatever it got after its position, never a message it had (seq 1 and 2).
    expect(seqs.filter((seq) => seq <= 2)).toEqual([]);
  }, 90_000);
});
