/**
 * Redis down while callers send input: the API stores the run in Postgres and then adds its
 * job to Redis. Once the run is committed the request has acted, so the answer says so
 * (202/201), and the sweeper adds the job Redis did not take when it is back. A 5xx there
 * would release the request's Idempotency-Key, and the caller's retry (the batch CLI
 * retries every 5xx) would store the input a second time.
 */
import type { ChildProcess } from "node:child_process";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import type { FleetClient } from "../src/producer/client.js";
import type { RunningSweeper } from "../src/sweeper/sweeper-process.js";
import { type FleetEnv, waitFor } from "./support/fleet-env.js";
import { startRedis, stopRedis } from "./support/private-redis.js";
import { startPrivateRedisFleet } from "./support/private-redis-fleet.js";

const agent = { model: { provider: "scripted" as const, steps: [{ text: "done" }] } };

describe("input accepted while Redis is down", () => {
  let fleet: FleetEnv;
  let client: FleetClient;
  let apiUrl: string;
  let sweeper: RunningSweeper;
  let redis: ChildProcess;
  let port: number;

  beforeAll(async () => {
    let api: { url: string };
    ({ port, redis, fleet, client, api, sweeper } = await startPrivateRedisFleet("redisdownapi"));
    apiUrl = api.url;
  });
  afterAll(async () => {
    if (redis && (redis.exitCode !== null || redis.signalCode !== null)) redis = await startRedis(port);
    await sweeper?.stop();
    await fleet?.close();
    if (redis) await stopRedis(redis);
  });

  it("answers that the committed run was accepted, runs it once Redis is back, and a retry stores nothing twice", async () => {
    const { id } = await client.createSession({ agent });
    await stopRedis(redis);

    // What needs Redis now says the service is away, to try again: not a 500 that reads as a bug.
    const events = await fetch(`${apiUrl}/v1/sessions/${id}/events`);
    expect(events.status).toBe(503);
    expect(events.headers.get("retry-after")).toBe("1");
    expect(((await events.json()) as { error: { code: string } }).error.code).toBe("unavailable");

    const sent = await client.send(id, "hello", { idempotencyKey: "send-1" });
    const batch = await client.createBatch([{ agent, input: "in a batch" }], { idempotencyKey: "batch-1" });
    expect(sent.runId).toEqual(expect.any(String));
    expect(batch.sessions).toHaveLength(1);

    redis = await startRedis(port); // empty, as a failover without persistence leaves it
    await fleet.spawnWorker();
    // The caller retries anyway (say its connection dropped before the answer): replayed.
    expect(await client.send(id, "hello", { idempotencyKey: "send-1" })).toEqual(sent);
    expect(
      (await client.createBatch([{ agent, input: "in a batch" }], { idempotencyKey: "batch-1" })).id,
    ).toBe(batch.id);

    const { sql } = fleet.database;
    await waitFor(
      async () =>
        (await sql`select 1 from sessions where tail_state = 'completed'`).length === 2 &&
        (await sql`select 1 from runs where status <> 'ended'`).length === 0,
      30_000,
      "both sessions answered",
    );
    const users = await sql<{ n: number }[]>`select count(*)::int as n from messages where role = 'user'`;
    expect(users[0]!.n).toBe(2);
    expect((await sql`select 1 from batches`).length).toBe(1);
    expect((await client.getSession(id)).messages.map((m) => m.role)).toEqual(["user", "assistant"]);
  }, 60_000);
});
