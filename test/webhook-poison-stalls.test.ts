/**
 * A webhook whose delivery kills its sweeper every time (a "poison" delivery: the receiver's
 * answer, or the request itself, takes the process down) has one retry budget like any other.
 * BullMQ's stalled-job recovery sends such a delivery again without counting an attempt, and
 * once it had stalled past the limit (3), BullMQ failed it as an UnrecoverableError: the
 * sweeper took that for a malformed job and recorded nothing, so Postgres still owed the
 * webhook, and a minute later the sweeper queued it again with a fresh budget — four more
 * kills, and so on without end. Now the give-up is recorded (`webhook_failed_at`, the metric's
 * `abandoned`, a log line naming the reason), and the failed job is never queued again.
 * Real `fleet sweeper` processes, each SIGKILLed by the receiver as the delivery arrives.
 */
import { createServer, type Server } from "node:http";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import type { FleetClient } from "../src/producer/client.js";
import { openWebhookQueue, WEBHOOK_ATTEMPTS, WEBHOOK_MAX_STALLS } from "../src/shared/queues.js";
import { BatchStore } from "../src/shared/store/batches.js";
import { ensureWebhookQueued, webhookBudgetSpent } from "../src/sweeper/webhook-owed.js";
import { createFleetEnv, type FleetEnv, type WorkerProcess, waitFor } from "./support/fleet-env.js";

describe("one retry budget per webhook, stalls counted", () => {
  it("is spent by the attempts, stalls counted among them, or by one stall past the limit", () => {
    expect(webhookBudgetSpent({ attemptsMade: 0, stalledCounter: 0, attempts: WEBHOOK_ATTEMPTS })).toBeNull();
    expect(webhookBudgetSpent({ attemptsMade: 39, attempts: WEBHOOK_ATTEMPTS })).toBeNull();
    expect(webhookBudgetSpent({ attemptsMade: 40, attempts: WEBHOOK_ATTEMPTS })).toMatch(
      /40 attempts are spent/,
    );
    // A stall is an attempt: 37 failed and 3 stalled leave none.
    expect(webhookBudgetSpent({ attemptsMade: 36, stalledCounter: WEBHOOK_MAX_STALLS })).toBeNull();
    expect(webhookBudgetSpent({ attemptsMade: 37, stalledCounter: WEBHOOK_MAX_STALLS })).toMatch(
      /40 attempts are spent \(3 of them ended by its sweeper's death\)/,
    );
    expect(webhookBudgetSpent({ attemptsMade: 0, stalledCounter: WEBHOOK_MAX_STALLS })).toBeNull();
    expect(webhookBudgetSpent({ attemptsMade: 1, stalledCounter: WEBHOOK_MAX_STALLS + 1 })).toMatch(
      /died during the delivery 4 times/,
    );
    // A job's own lower limit, never a higher one.
    expect(webhookBudgetSpent({ attemptsMade: 2, attempts: 2 })).toMatch(/2 attempts are spent/);
    expect(webhookBudgetSpent({ attemptsMade: 40, attempts: 100 })).toMatch(/40 attempts are spent/);
  });
});

describe("a webhook whose delivery kills its sweeper each time", () => {
  let fleet: FleetEnv;
  let client: FleetClient;
  let store: BatchStore;
  let server: Server;
  let url = "";
  /** The sweeper alive now: the receiver kills it when a delivery arrives. */
  let current: WorkerProcess | undefined;
  const attempts: string[] = [];

  beforeAll(async () => {
    fleet = await createFleetEnv("webhookpoison", {
      env: {
        FLEET_WEBHOOK_SECRET: "whsec-poison",
        FLEET_WEBHOOK_LOCK_MS: "1000",
        FLEET_WEBHOOK_STALL_CHECK_MS: "200",
      },
    });
    ({ client } = await fleet.startApi());
    store = new BatchStore(fleet.database);
    server = createServer((req) => {
      // Headers in, nothing answered: the sender dies mid-delivery.
      attempts.push(String(req.headers["fleet-delivery-attempt"]));
      current?.child.kill("SIGKILL");
    });
    await new Promise<void>((resolve) => server.listen(0, "127.0.0.1", resolve));
    url = `http://127.0.0.1:${(server.address() as { port: number }).port}/`;
  }, 60_000);
  afterAll(async () => {
    server?.closeAllConnections();
    server?.close();
    await fleet?.close();
  });

  it("is given up after the stall limit, recorded failed with its reason, and never queued again", async () => {
    const agent = { model: { provider: "scripted" as const, steps: [{ text: "ok" }] } };
    const batch = await client.createBatch([{ agent }], { webhook: { url } });
    await client.getBatch(batch.id); // records its end
    expect(await store.webhookOwed(batch.id)).toBe(true);
    let last: WorkerProcess | undefined;
    for (let spawned = 0; spawned < WEBHOOK_MAX_STALLS + 3; spawned++) {
      const sweeper = await fleet.spawnSweeper();
      current = sweeper;
      last = sweeper;
      let killed = false;
      void sweeper.exited.then(() => {
        killed = true;
      });
      await waitFor(
        async () => killed || !(await store.webhookOwed(batch.id)),
        30_000,
        `the sweeper killed by the delivery, or the webhook given up (attempts ${attempts}): ${sweeper.output().slice(-1500)}`,
      );
      if (!killed) break;
    }
    // Sent once, then again after each of the stall limit's recoveries — then given up.
    expect(attempts).toEqual(Array.from({ length: WEBHOOK_MAX_STALLS + 1 }, (_, i) => String(i + 1)));
    expect(await store.webhookOwed(batch.id)).toBe(false);
    const [row] = await fleet.database.sql<{ failed: boolean; delivered: boolean }[]>`
      select webhook_failed_at is not null as failed, webhook_delivered_at is not null as delivered
      from batches where id = ${batch.id}`;
    expect(row).toEqual({ failed: true, delivered: false });
    // The tenant sees it too: given up, not still being tried.
    const { webhook } = await client.getBatch(batch.id);
    expect(webhook).toEqual({
      url,
      deliveredAt: null,
      failedAt: expect.any(String),
      // Why (additive, test/webhook-last-error.test.ts): the stalls, not a receiver's answer.
      lastError: expect.stringMatching(
        new RegExp(`^given up: its sweeper died during the delivery ${WEBHOOK_MAX_STALLS + 1} times`),
      ),
    });
    expect(Date.parse(webhook!.failedAt!)).not.toBeNaN();
    await waitFor(
      () => /webhook delivery failed/.test(last!.output()),
      10_000,
      "the give-up logged by the sweeper",
    );
    expect(last!.output()).toMatch(/its sweeper died during the delivery/);
    // The failed job is never taken for one with attempts left and queued anew: not even once
    // the minute a failed job is left to settle has passed.
    const queue = openWebhookQueue(fleet.redis, fleet.config.prefix);
    try {
      await fleet.database.sql`update batches set webhook_failed_at = null where id = ${batch.id}`;
      const done = await ensureWebhookQueued(queue, batch.id, (id) => store.webhookOwed(id), {
        now: Date.now() + 61_000,
        markFailed: (id) => store.markDeliveryFailed(id),
      });
      expect(done).toBe("recorded-failed");
      expect(await store.webhookOwed(batch.id)).toBe(false);
    } finally {
      await queue.close();
    }
    expect(attempts).toHaveLength(WEBHOOK_MAX_STALLS + 1);
  }, 240_000);
});
