/**
 * A webhook has one retry budget (40 attempts over more than 24 h). When its last attempt
 * failed and recording that give-up in Postgres failed too (Postgres away at that moment, or
 * a sweeper killed between the two), Postgres still owed the webhook, and a minute later the
 * sweeper took the failed job for one from a lost timeline and queued it again — 40 attempts
 * more, again and again. The give-up is now recorded then instead; a job that failed with
 * attempts left (bad data under the batch's job id) is still queued again. (A job whose
 * sweepers were killed past BullMQ's stall limit has spent its budget too:
 * test/webhook-poison-stalls.test.ts.)
 */
import type { Job } from "bullmq";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import type { FleetClient } from "../src/producer/client.js";
import { bullmq } from "../src/shared/cjs-packages.js";
import { openWebhookQueue, QUEUES } from "../src/shared/queues.js";
import { BatchStore } from "../src/shared/store/batches.js";
import { ensureWebhookQueued } from "../src/sweeper/webhook-owed.js";
import { createFleetEnv, type FleetEnv, waitFor } from "./support/fleet-env.js";

describe("a webhook job that failed for good without its give-up recorded", () => {
  let fleet: FleetEnv;
  let client: FleetClient;
  let store: BatchStore;
  const agent = { model: { provider: "scripted" as const, steps: [{ text: "ok" }] } };

  beforeAll(async () => {
    fleet = await createFleetEnv("webhookgiveup", { env: { FLEET_WEBHOOK_SECRET: "whsec-giveup" } });
    ({ client } = await fleet.startApi());
    store = new BatchStore(fleet.database);
  }, 60_000);
  afterAll(async () => fleet?.close());

  /** A batch that has ended, owing its webhook, whose job failed with `attempts` of which `made` were made. */
  async function failedJob(attempts: number, made: number): Promise<string> {
    const batch = await client.createBatch([{ agent }], { webhook: { url: "http://127.0.0.1:9/" } });
    await client.getBatch(batch.id); // records its end
    expect(await store.webhookOwed(batch.id)).toBe(true);
    const queue = openWebhookQueue(fleet.redis, fleet.config.prefix);
    const worker = new bullmq.Worker(
      QUEUES.webhooks.name,
      async (job: Job) => {
        if (job.attemptsMade + 1 < made) throw new Error("the receiver answered HTTP 500");
        throw new bullmq.UnrecoverableError("the last failure");
      },
      { connection: fleet.redis.duplicate({ maxRetriesPerRequest: null }), prefix: fleet.config.prefix },
    );
    try {
      const job = await queue.add(
        QUEUES.webhooks.job,
        { batchId: batch.id },
        { jobId: QUEUES.webhooks.jobId({ batchId: batch.id }), attempts, backoff: 1 },
      );
      await waitFor(async () => (await job.getState()) === "failed", 20_000, "the job failed");
      const failed = (await queue.getJob(job.id!))!;
      // As BullMQ counts a last failure: attemptsMade is what was made.
      expect(failed.attemptsMade >= attempts).toBe(made >= attempts);
    } finally {
      await worker.close();
      await queue.close();
    }
    return batch.id;
  }

  const ensure = async (batchId: string) => {
    const queue = openWebhookQueue(fleet.redis, fleet.config.prefix);
    try {
      return await ensureWebhookQueued(queue, batchId, (id) => store.webhookOwed(id), {
        now: Date.now() + 61_000,
        markFailed: (id) => store.markDeliveryFailed(id),
      });
    } finally {
      await queue.close();
    }
  };

  it("records the give-up of a job that spent its attempts, and queues nothing", async () => {
    const batchId = await failedJob(2, 2);
    expect(await ensure(batchId)).toBe("recorded-failed");
    expect(await store.webhookOwed(batchId)).toBe(false);
    expect((await client.getBatch(batchId)).webhook?.deliveredAt ?? null).toBeNull();
    // Nothing owed any more: left as it is from now on.
    expect(await ensure(batchId)).toBe("left");
  }, 60_000);

  it("queues again one that failed with attempts left", async () => {
    const batchId = await failedJob(3, 1);
    expect(await ensure(batchId)).toBe("requeued");
    expect(await store.webhookOwed(batchId)).toBe(true);
  }, 60_000);
});
