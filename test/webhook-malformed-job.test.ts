/**
 * A webhook job whose data is not `{ batchId }` (a job added or edited by hand in Bull Board,
 * or one of another release's shape) is bad input: it fails once, clearly, and is never
 * retried (invariant 5), as a malformed run job does. Before, its parse error was retried as a
 * failed delivery, 40 attempts over more than 24 h, each counted
 * `fleet_webhook_deliveries_total{outcome="failed"}` (FleetWebhookDeliveriesFailing) and the
 * last `abandoned` (FleetWebhooksAbandoned), though no webhook was ever sent. So is a `batchId`
 * Postgres cannot take (U+0000: every look-up of it failed as an outage would, and was retried
 * the same way). Real Redis (BullMQ), and real Postgres for the batch's look-up.
 */
import { randomUUID } from "node:crypto";
import type { Worker } from "bullmq";
import postgres from "postgres";
import { afterAll, describe, expect, it } from "vitest";
import { createMetrics } from "../src/shared/metrics.js";
import { openWebhookQueue, QUEUES } from "../src/shared/queues.js";
import type { BatchStore } from "../src/shared/store/batches.js";
import { startWebhookWorker } from "../src/sweeper/batch-ends.js";
import { waitFor } from "./support/fleet-env.js";

const REDIS_URL = new URL(process.env.TEST_REDIS_URL ?? "redis://127.0.0.1:6379");
const connection = {
  host: REDIS_URL.hostname,
  port: Number(REDIS_URL.port || 6379),
  maxRetriesPerRequest: null,
};

describe("a malformed webhook job", () => {
  const prefix = `t-webhook-bad-${randomUUID().slice(0, 8)}`;
  const queue = openWebhookQueue(connection, prefix);
  let worker: Worker | undefined;
  const sql = postgres(process.env.TEST_ADMIN_DATABASE_URL ?? "postgres://postgres@127.0.0.1:5432/postgres", {
    max: 1,
    onnotice: () => {},
  });
  afterAll(async () => {
    await worker?.close();
    await sql.end();
    await queue.obliterate({ force: true }).catch(() => {});
    await queue.close();
  });

  it.each([
    ["a number", 42, "webhook-42"],
    ["holding U+0000", "b\u0000", "webhook-nul"],
  ])(
    "with a batchId that is %s fails once, is not retried, and counts no delivery",
    async (_what, batchId, jobId) => {
      await worker?.close();
      const failedFor: string[] = [];
      const store = {
        // Asks Postgres, as the real store's look-up does (a batch id it cannot take throws).
        webhookTarget: async (id: string) => {
          await sql`select ${id}::text as id`;
          return null;
        },
        markDeliveryFailed: async (batchId: string) => {
          failedFor.push(batchId);
        },
      } as unknown as BatchStore;
      const metrics = createMetrics("sweeper");
      const warnings: string[] = [];
      worker = startWebhookWorker({
        connection,
        prefix,
        store,
        settings: {
          secret: "whsec-bad",
          allowed: [],
          denyPrivate: false,
          retryBaseMs: 20,
          timeoutMs: 5_000,
          lockMs: 10_000,
          stallCheckMs: 5_000,
        },
        log: {
          info: () => {},
          warn: (...args: unknown[]) => {
            warnings.push(String(args[1]));
          },
        },
        metrics,
      });
      const job = await queue.add(QUEUES.webhooks.job, { batchId }, { jobId });
      // Failed for good, or tried a second time (the defect): whichever comes first.
      await waitFor(
        async () => {
          const fresh = await queue.getJob(job.id!);
          return (await fresh?.getState()) === "failed" || (fresh?.attemptsMade ?? 0) >= 2;
        },
        15_000,
        "the job failed or retried",
      );
      const fresh = await queue.getJob(job.id!);
      expect(fresh?.attemptsMade).toBe(1);
      expect(await fresh?.getState()).toBe("failed");
      expect(fresh?.failedReason).toMatch(/job\.data\.batchId/);
      const counted = Object.fromEntries(
        (await metrics.webhookDeliveries.get()).values.map((v) => [v.labels.outcome, v.value]),
      );
      expect(counted).toEqual({ delivered: 0, failed: 0, abandoned: 0 });
      expect(failedFor).toEqual([]);
      expect(warnings).not.toContain("webhook delivery failed");
    },
    30_000,
  );
});
