/**
 * A webhook its receiver took (2xx), kept on the job in Redis (`receiverTookIt`) before its
 * record in Postgres, is never recorded failed. A delivery whose sweeper died after the 2xx,
 * or whose records kept failing, went on as a stall (a resend, counted against the budget)
 * or a failed record; once the budget was spent — BullMQ failing the job past its stall
 * limit, or the sweeper's scan finding the failed job a minute later — the batch was marked
 * `webhook.failedAt` although its receiver had it. Now a spent job whose receiver took it is
 * recorded delivered (by the delivery worker's `failed` handler, and by the scan).
 * (A sweeper that dies between the 2xx and keeping it on the job cannot know the receiver
 * took it: such a delivery is sent again under the same Fleet-Delivery-Id, and a give-up
 * then means "never confirmed", which webhook.lastError says.)
 */
import { createServer, type Server } from "node:http";
import type { Job } from "bullmq";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import type { FleetClient } from "../src/producer/client.js";
import { bullmq } from "../src/shared/cjs-packages.js";
import { openWebhookQueue, QUEUES, WEBHOOK_MAX_STALLS } from "../src/shared/queues.js";
import { BatchStore } from "../src/shared/store/batches.js";
import { ensureWebhookQueued } from "../src/sweeper/webhook-owed.js";
import { createFleetEnv, type FleetEnv, type WorkerProcess, waitFor } from "./support/fleet-env.js";

describe("a webhook its receiver took, whose delivery was never recorded", () => {
  let fleet: FleetEnv;
  let client: FleetClient;
  let store: BatchStore;
  let server: Server;
  let url = "";
  const taken: string[] = [];
  const agent = { model: { provider: "scripted" as const, steps: [{ text: "ok" }] } };

  beforeAll(async () => {
    fleet = await createFleetEnv("webhooktaken", {
      env: {
        FLEET_WEBHOOK_SECRET: "whsec-taken",
        FLEET_WEBHOOK_LOCK_MS: "1000",
        FLEET_WEBHOOK_STALL_CHECK_MS: "200",
      },
    });
    ({ client } = await fleet.startApi());
    store = new BatchStore(fleet.database);
    server = createServer((req, res) => {
      req.resume();
      req.on("end", () => {
        taken.push(String(req.headers["fleet-delivery-id"]));
        res.writeHead(204).end();
      });
    });
    await new Promise<void>((resolve) => server.listen(0, "127.0.0.1", resolve));
    url = `http://127.0.0.1:${(server.address() as { port: number }).port}/`;
  }, 60_000);
  afterAll(async () => {
    server?.close();
    await fleet?.close();
  });

  const recorded = async (batchId: string) => {
    const [row] = await fleet.database.sql<{ failed: boolean; delivered: boolean }[]>`
      select webhook_failed_at is not null as failed, webhook_delivered_at is not null as delivered
      from batches where id = ${batchId}`;
    return row;
  };

  it("the scan records a failed job whose receiver took it as delivered, not failed", async () => {
    const batch = await client.createBatch([{ agent }], { webhook: { url } });
    await client.getBatch(batch.id); // records its end
    const queue = openWebhookQueue(fleet.redis, fleet.config.prefix);
    const worker = new bullmq.Worker(
      QUEUES.webhooks.name,
      async (job: Job) => {
        // The receiver took it and that was kept on the job; every record of it failed.
        await job.updateProgress({ receiverTookIt: true });
        throw new Error("the receiver took the webhook; recording that failed: Postgres away");
      },
      { connection: fleet.redis.duplicate({ maxRetriesPerRequest: null }), prefix: fleet.config.prefix },
    );
    try {
      const job = await queue.add(
        QUEUES.webhooks.job,
        { batchId: batch.id },
        { jobId: QUEUES.webhooks.jobId({ batchId: batch.id }), attempts: 2, backoff: 1 },
      );
      await waitFor(async () => (await job.getState()) === "failed", 20_000, "the job failed");
      const done = await ensureWebhookQueued(queue, batch.id, (id) => store.webhookOwed(id), {
        now: Date.now() + 61_000,
        markFailed: (id) => store.markDeliveryFailed(id),
        markDelivered: (id) => store.markDelivered(id),
      });
      expect(done).toBe("recorded-delivered");
      expect(await recorded(batch.id)).toEqual({ failed: false, delivered: true });
    } finally {
      await worker.close();
      await queue.close();
    }
  }, 60_000);

  it("sweepers killed while recording it, past the stall limit: recorded delivered, sent once", async () => {
    const batch = await client.createBatch([{ agent }], { webhook: { url } });
    await client.getBatch(batch.id); // records its end
    const jobId = QUEUES.webhooks.jobId({ batchId: batch.id });
    // Holds the batch's row: each sweeper's record of the delivery waits on it, and is killed there.
    const holder = await fleet.database.sql.reserve();
    await holder`begin`;
    await holder`select id from batches where id = ${batch.id} for update`;
    const queue = openWebhookQueue(fleet.redis, fleet.config.prefix);
    const waitingRecords = () => fleet.database.sql<{ pid: number }[]>`
      select pid from pg_stat_activity
       where datname = current_database() and wait_event_type = 'Lock'
         and query like 'update batches set webhook_%'`;
    let last: WorkerProcess | undefined;
    try {
      for (let killed = 0; killed <= WEBHOOK_MAX_STALLS; killed++) {
        const sweeper = await fleet.spawnSweeper();
        last = sweeper;
        await waitFor(
          async () => {
            const job = await queue.getJob(jobId);
            return (
              (job?.progress as { receiverTookIt?: boolean } | undefined)?.receiverTookIt === true &&
              (await waitingRecords()).length > 0
            );
          },
          30_000,
          `the delivery taken and its record waiting: ${sweeper.output().slice(-1500)}`,
        );
        sweeper.child.kill("SIGKILL");
        await sweeper.exited;
        // A killed client's statement would still run once the row is free: end it too.
        for (const { pid } of await waitingRecords())
          await fleet.database.sql`select pg_terminate_backend(${pid})`;
      }
      // One more sweeper finds the last stall, past the limit: BullMQ fails the job.
      const finder = await fleet.spawnSweeper();
      last = finder;
      await waitFor(
        async () => (await (await queue.getJob(jobId))?.getState()) === "failed",
        30_000,
        `the job failed past its stall limit: ${finder.output().slice(-1500)}`,
      );
    } finally {
      await holder`rollback`;
      holder.release();
    }
    await waitFor(async () => !(await store.webhookOwed(batch.id)), 20_000, "the webhook settled");
    expect(await recorded(batch.id)).toEqual({ failed: false, delivered: true });
    expect(taken).toEqual([jobId]);
    const { webhook } = await client.getBatch(batch.id);
    expect(webhook?.deliveredAt).toEqual(expect.any(String));
    expect(webhook?.failedAt).toBeUndefined();
    last?.child.kill("SIGTERM");
    await last?.exited;
    await queue.close();
  }, 240_000);
});
