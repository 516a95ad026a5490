/**
 * A webhook whose receiver took it (2xx) but whose delivery could not be recorded in Postgres
 * (`markDelivered` failed) is counted once, `delivered`, and sent once: before, it was counted
 * `delivered` and then `failed`, and the job's retry sent it to the receiver again (and counted
 * it `delivered` a second time). Real Redis (BullMQ), a real receiver; the store is a stand-in
 * whose first `markDelivered` fails, as when Postgres does not answer.
 */
import { randomUUID } from "node:crypto";
import { createServer, type Server } from "node:http";
import type { Worker } from "bullmq";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { createMetrics } from "../src/shared/metrics.js";
import { enqueueWebhook, openWebhookQueue } from "../src/shared/queues.js";
import type { BatchStore } from "../src/shared/store/batches.js";
import { failureOutcome, startWebhookWorker, WebhookRecordError } from "../src/sweeper/batch-ends.js";
import { receiverTookIt } from "../src/sweeper/webhook-taken.js";
import { waitFor } from "./support/fleet-env.js";

const REDIS_URL = new URL(process.env.TEST_REDIS_URL ?? "redis://127.0.0.1:6379");
const connection = {
  host: REDIS_URL.hostname,
  port: Number(REDIS_URL.port || 6379),
  maxRetriesPerRequest: null,
};

describe("a delivery whose record fails", () => {
  const prefix = `t-webhook-once-${randomUUID().slice(0, 8)}`;
  const queue = openWebhookQueue(connection, prefix);
  let server: Server;
  let url = "";
  let worker: Worker | undefined;
  const posts: string[] = [];

  beforeAll(async () => {
    server = createServer((req, res) => {
      req.resume();
      req.on("end", () => {
        posts.push(String(req.headers["fleet-delivery-id"]));
        res.writeHead(204).end();
      });
    });
    await new Promise<void>((resolve) => server.listen(0, "127.0.0.1", resolve));
    url = `http://127.0.0.1:${(server.address() as { port: number }).port}/`;
  });
  afterAll(async () => {
    await worker?.close();
    await queue.obliterate({ force: true }).catch(() => {});
    await queue.close();
    server?.close();
  });

  it("is counted delivered once, never failed, sent once, and recorded by the retry", async () => {
    const batchId = randomUUID();
    const calls = { markDelivered: 0, recorded: 0, markDeliveryFailed: 0 };
    const store = {
      webhookTarget: async () => ({ url, tenant: "default" }),
      view: async (id: string) => ({ id, status: "completed" }),
      markDelivered: async () => {
        calls.markDelivered++;
        if (calls.markDelivered === 1) throw new Error("connection to Postgres lost");
        calls.recorded++;
      },
      markDeliveryFailed: async () => {
        calls.markDeliveryFailed++;
      },
    } as unknown as BatchStore;
    const metrics = createMetrics("sweeper");
    worker = startWebhookWorker({
      connection,
      prefix,
      store,
      settings: {
        secret: "whsec-once",
        allowed: [],
        denyPrivate: false,
        retryBaseMs: 50,
        timeoutMs: 5_000,
        lockMs: 10_000,
        stallCheckMs: 5_000,
      },
      log: { info: () => {}, warn: () => {} },
      metrics,
    });
    await enqueueWebhook(queue, { batchId });
    await waitFor(() => calls.recorded === 1, 15_000, "the delivery recorded by the retry");
    const job = await queue.getJob(`webhook-${batchId}`);
    await waitFor(async () => (await job?.getState()) === "completed", 5_000, "the job completed");
    const counted = Object.fromEntries(
      (await metrics.webhookDeliveries.get()).values.map((v) => [v.labels.outcome, v.value]),
    );
    console.log("deliveries counted", counted, "posts", posts.length, "store calls", calls);
    expect(counted).toEqual({ delivered: 1, failed: 0, abandoned: 0 });
    expect(posts).toEqual([`webhook-${batchId}`]);
    expect(calls).toEqual({ markDelivered: 2, recorded: 1, markDeliveryFailed: 0 });
  }, 30_000);

  it("decides how a failed attempt counts (pure)", () => {
    expect(failureOutcome(new Error("the receiver answered HTTP 500"), false)).toBe("failed");
    expect(failureOutcome(new Error("the receiver answered HTTP 500"), true)).toBe("abandoned");
    expect(failureOutcome(new WebhookRecordError(new Error("down")), true)).toBeNull();
    expect(receiverTookIt({ receiverTookIt: true })).toBe(true);
    expect(receiverTookIt(0)).toBe(false);
    expect(receiverTookIt(null)).toBe(false);
  });
});
