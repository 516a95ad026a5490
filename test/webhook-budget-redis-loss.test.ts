/**
 * A webhook's one retry budget (contracts §9: retried "for at least 24 h", 40 attempts) across a
 * Redis that lost its data (FLUSHALL: a failover without persistence). The delivery's job, with
 * its count of attempts and its first queueing, was only in Redis: the sweeper's scan found
 * the webhook still owed in Postgres and queued a new job, attempt 1 again, with 40 fresh
 * attempts and a new day — a receiver that keeps failing was tried from zero after each loss.
 * Here the attempts go on counting (the `Fleet-Delivery-Attempt` header) after the loss.
 */
import type { ChildProcess } from "node:child_process";
import { createServer, type Server } from "node:http";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import type { FleetClient } from "../src/producer/client.js";
import { loadConfig } from "../src/shared/config.js";
import { WEBHOOK_RETRY_SPAN_MS, webhookBackoffMs } from "../src/shared/webhook-backoff.js";
import { type RunningSweeper, startSweeper } from "../src/sweeper/sweeper-process.js";
import { webhookBudgetSpent } from "../src/sweeper/webhook-owed.js";
import { createFleetEnv, type FleetEnv, waitFor } from "./support/fleet-env.js";
import { freePort, startRedis, stopRedis } from "./support/private-redis.js";

describe("the budget a job carries from Postgres (pure)", () => {
  it("counts the attempts begun before it, and holds the last for the first queueing's day", () => {
    expect(webhookBudgetSpent({ attemptsMade: 2, attempts: 40, priorAttempts: 37 })).toBeNull();
    expect(webhookBudgetSpent({ attemptsMade: 3, attempts: 40, priorAttempts: 37 })).toMatch(/40 attempts/);
    const firstQueuedAt = 1_000_000;
    const job = {
      timestamp: firstQueuedAt + 3_600_000,
      opts: { attempts: 40 },
      data: { priorAttempts: 30, firstQueuedAt },
    };
    // Retry 8 of this job precedes attempt 40: it waits for the day since the first queueing.
    expect(webhookBackoffMs({ retryBaseMs: 10 }, 9, job, firstQueuedAt + 1_000)).toBeGreaterThanOrEqual(
      WEBHOOK_RETRY_SPAN_MS - 1_000,
    );
    expect(webhookBackoffMs({ retryBaseMs: 10 }, 9, job, firstQueuedAt + 1_000)).toBeLessThan(
      WEBHOOK_RETRY_SPAN_MS,
    );
  });
});

describe("a failing webhook's attempts across a Redis FLUSHALL", () => {
  let fleet: FleetEnv;
  let client: FleetClient;
  let sweeper: RunningSweeper | undefined;
  let redis: ChildProcess;
  let receiver: Server;
  const attempts: number[] = [];
  /** Requests to /spent (the second test's batch). */
  let spentAsked = 0;

  beforeAll(async () => {
    const port = await freePort();
    redis = await startRedis(port);
    fleet = await createFleetEnv("webhookbudgetloss", {
      redisUrl: `redis://127.0.0.1:${port}`,
      env: { FLEET_WEBHOOK_SECRET: "whsec-budget-loss", FLEET_WEBHOOK_RETRY_MS: "200" },
    });
    ({ client } = await fleet.startApi());
    await fleet.spawnWorker();
    receiver = createServer((req, res) => {
      if (req.url === "/spent") spentAsked++;
      else attempts.push(Number(req.headers["fleet-delivery-attempt"]));
      req.resume();
      req.on("end", () => res.writeHead(500).end());
    });
    await new Promise<void>((resolve) => receiver.listen(0, "127.0.0.1", resolve));
    sweeper = await startSweeper({ ...loadConfig(fleet.env), logLevel: "silent" }, { serveMetrics: false });
  }, 90_000);
  afterAll(async () => {
    await sweeper?.stop();
    receiver?.closeAllConnections();
    receiver?.close();
    await fleet?.close();
    if (redis) await stopRedis(redis);
  });

  it("goes on from the attempts made, not from attempt 1 with a fresh budget", async () => {
    const url = `http://127.0.0.1:${(receiver.address() as { port: number }).port}/`;
    const batch = await client.createBatch(
      [{ agent: { model: { provider: "scripted", steps: [{ text: "ok" }] } } }],
      {
        webhook: { url },
      },
    );
    await waitFor(async () => attempts.length >= 3, 60_000, "three attempts");
    const before = attempts.length;
    await fleet.redis.flushall();
    await waitFor(async () => attempts.length >= before + 2, 60_000, "attempts after the loss");
    // Each attempt's number once, in order: none from 1 again.
    expect(attempts).toEqual(attempts.map((_, i) => i + 1));
    expect((await client.getBatch(batch.id)).webhook?.failedAt ?? null).toBeNull();
    const [row] = await fleet.database.sql<{ n: number }[]>`
      select webhook_attempts as n from batches where id = ${batch.id}`;
    expect(row!.n).toBeGreaterThanOrEqual(before + 2);
  }, 120_000);

  it("a budget Postgres counts spent is recorded given up, not queued with a fresh one", async () => {
    const url = `http://127.0.0.1:${(receiver.address() as { port: number }).port}/spent`;
    const batch = await client.createBatch(
      [{ agent: { model: { provider: "scripted", steps: [{ text: "ok" }] } } }],
      { webhook: { url } },
    );
    await waitFor(async () => spentAsked >= 1, 60_000, "an attempt");
    // As if every attempt had been begun, the job's give-up then lost with Redis.
    await fleet.database.sql`update batches set webhook_attempts = 40 where id = ${batch.id}`;
    await fleet.redis.flushall();
    await waitFor(
      async () => (await client.getBatch(batch.id)).webhook?.failedAt != null,
      60_000,
      "the webhook given up",
    );
  }, 120_000);
});
