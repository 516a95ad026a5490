/**
 * Webhook deliveries share a few slots per sweeper (8), and a receiver that never answers holds
 * one for a whole attempt (10 s). One tenant with an API key could end any number of batches
 * (one without sessions ends at once) whose webhooks go to such a receiver: queued first in,
 * first out, every other tenant's webhook then waited behind all of them (1,000 of them: about
 * 21 minutes). Deliveries are now queued with per-tenant priorities: a tenant's k-th owed
 * webhook goes out about with every other tenant's k-th — k counted in the order its batches
 * ended, not were created (batches ending newest first were all queued at priority 1).
 */
import { createServer, type Server } from "node:http";
import { afterAll, beforeAll, expect, it } from "vitest";
import { openWebhookQueue, QUEUES } from "../src/shared/queues.js";
import { BatchStore } from "../src/shared/store/batches.js";
import { BatchEnds, startWebhookWorker } from "../src/sweeper/batch-ends.js";
import { createFleetEnv, type FleetEnv, waitFor } from "./support/fleet-env.js";

const FLOOD = 6;

let fleet: FleetEnv;
let server: Server;
let url: string;
const order: string[] = [];

beforeAll(async () => {
  fleet = await createFleetEnv("webhook-fairness");
  server = createServer((req, res) => {
    let body = "";
    req.on("data", (d) => {
      body += d;
    });
    req.on("end", () => {
      order.push((JSON.parse(body) as { id: string }).id);
      res.writeHead(204).end();
    });
  });
  await new Promise<void>((resolve) => server.listen(0, "127.0.0.1", resolve));
  url = `http://127.0.0.1:${(server.address() as { port: number }).port}/hook`;
});
afterAll(async () => {
  server?.close();
  await fleet?.close();
});

/** One delivery at a time, all queued before the first is taken: the order is the queue's. */
function oneAtATime(store: BatchStore) {
  return startWebhookWorker({
    connection: fleet.redis,
    prefix: fleet.config.prefix,
    store,
    settings: {
      secret: "whsec-fair",
      allowed: [],
      denyPrivate: false,
      retryBaseMs: 1_000,
      timeoutMs: 5_000,
      lockMs: 10_000,
      stallCheckMs: 5_000,
    },
    log: { info: () => {}, warn: () => {} },
    concurrency: 1,
  });
}

/** The priority a batch's webhook job was queued with. */
const priorityIn = (queue: ReturnType<typeof openWebhookQueue>) => async (batchId: string) =>
  (await queue.getJob(QUEUES.webhooks.jobId({ batchId })))?.opts.priority;

it("a tenant's webhook is not queued behind another tenant's flood of them", async () => {
  const { sql } = fleet.database;
  // Batches without sessions: each has ended as soon as it exists. The flood came first.
  await sql`
    insert into batches (id, tenant, webhook_url, created_at)
    select 'flood-' || i, 'flood', ${url}, now() - interval '1 hour' + i * interval '1 second'
      from generate_series(1, ${FLOOD}) as i`;
  await sql`insert into batches (id, tenant, webhook_url) values ('quiet-1', 'quiet', ${url})`;

  const queue = openWebhookQueue(fleet.redis, fleet.config.prefix);
  const store = new BatchStore(fleet.database);
  const worker = { current: undefined as ReturnType<typeof startWebhookWorker> | undefined };
  try {
    await new BatchEnds({ store, queue, log: { info: () => {}, warn: () => {} } }).scan();
    const priority = priorityIn(queue);
    expect(await priority("flood-1")).toBe(1);
    expect(await priority(`flood-${FLOOD}`)).toBe(FLOOD);
    expect(await priority("quiet-1")).toBe(1);

    worker.current = oneAtATime(store);
    await waitFor(() => order.length === FLOOD + 1, 20_000, "every delivery");
    // Before: quiet-1 went out last, after the whole flood.
    expect(order.indexOf("quiet-1")).toBeLessThanOrEqual(1);
    expect(order.filter((id) => id.startsWith("flood-"))).toEqual(
      Array.from({ length: FLOOD }, (_, i) => `flood-${i + 1}`),
    );
  } finally {
    await worker.current?.close();
    await queue.close();
  }
}, 40_000);

it("a tenant whose batches end in another order than they were created still queues its k-th owed webhook k-th", async () => {
  const { sql } = fleet.database;
  order.length = 0;
  // Open batches (they end only once closed), created oldest first and closed newest first:
  // each ends while every older one of its tenant is still running. Its priority counted the
  // older owed webhooks, none, so every one of the flood was queued at priority 1, and the
  // quiet tenant's webhook waited behind all of them again.
  await sql`
    insert into batches (id, tenant, webhook_url, open, created_at)
    select 'late-' || i, 'late', ${url}, true, now() - interval '1 hour' + i * interval '1 second'
      from generate_series(1, ${FLOOD}) as i`;
  const queue = openWebhookQueue(fleet.redis, fleet.config.prefix);
  const store = new BatchStore(fleet.database);
  const ends = new BatchEnds({ store, queue, log: { info: () => {}, warn: () => {} } });
  const worker = { current: undefined as ReturnType<typeof startWebhookWorker> | undefined };
  try {
    for (let i = FLOOD; i >= 1; i--) {
      await sql`update batches set open = false where id = ${`late-${i}`}`;
      expect(await ends.scan()).toBe(1);
    }
    await sql`insert into batches (id, tenant, webhook_url) values ('calm-1', 'calm', ${url})`;
    expect(await ends.scan()).toBe(1);
    const priority = priorityIn(queue);
    // The first of the flood to end goes first, the last one last (before: all 1).
    expect(await priority(`late-${FLOOD}`)).toBe(1);
    expect(await priority("late-1")).toBe(FLOOD);
    expect(await priority("calm-1")).toBe(1);

    worker.current = oneAtATime(store);
    await waitFor(() => order.length === FLOOD + 1, 20_000, "every delivery");
    expect(order.indexOf("calm-1")).toBeLessThanOrEqual(1);
    // A tenant's own webhooks go out in the order its batches ended.
    expect(order.filter((id) => id.startsWith("late-"))).toEqual(
      Array.from({ length: FLOOD }, (_, i) => `late-${FLOOD - i}`),
    );
  } finally {
    await worker.current?.close();
    await queue.close();
  }
}, 40_000);
